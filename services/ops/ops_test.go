package ops

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/config"
)

var inventory = Service{Name: "inventory", Queues: []string{"inventory.order-placed"}, Outbox: true}
var notification = Service{Name: "notification", Queues: []string{"notification.stock-events"}}

func TestCommandLinesReadAsMeant(t *testing.T) {
	const id = "01a22c4e-fc26-7e63-9791-9e45237af125"
	const id2 = "01a22c4e-fc2c-7724-87eb-26ff1d0a3428"
	for _, c := range []struct {
		svc  Service
		args string
		want command
	}{
		{inventory, "dlq list", command{name: "dlq list", queues: []string{"inventory.order-placed"}}},
		{inventory, "dlq list inventory.order-placed", command{name: "dlq list", queues: []string{"inventory.order-placed"}}},
		{inventory, "dlq list inventory.order-placed.dlq", command{name: "dlq list", queues: []string{"inventory.order-placed"}}},
		{inventory, "dlq replay", command{name: "dlq replay", queues: []string{"inventory.order-placed"}}},
		{inventory, "dlq replay inventory.order-placed --id a --id b,c", command{name: "dlq replay", queues: []string{"inventory.order-placed"}, ids: []string{"a", "b", "c"}}},
		{inventory, "dlq replay --id=a inventory.order-placed", command{name: "dlq replay", queues: []string{"inventory.order-placed"}, ids: []string{"a"}}},
		{inventory, "outbox list-dead", command{name: "outbox list-dead"}},
		{inventory, "outbox retry-dead", command{name: "outbox retry-dead"}},
		{inventory, "outbox retry-dead --id " + id + " --id " + id2, command{name: "outbox retry-dead", ids: []string{id, id2}}},
		{inventory, "dlq", command{name: "help"}},
		{inventory, "outbox --help", command{name: "help"}},
		{inventory, "dlq replay -h", command{name: "help"}},
	} {
		got, err := parse(c.svc, strings.Fields(c.args))
		if err != nil || got.name != c.want.name || !slices.Equal(got.queues, c.want.queues) || !slices.Equal(got.ids, c.want.ids) {
			t.Errorf("%s %s = %+v, %v; want %+v", c.svc.Name, c.args, got, err, c.want)
		}
	}
}

func TestCommandLinesThatCannotBeMeantAreRefusedBeforeAnythingIsOpened(t *testing.T) {
	// cfg points nowhere: a refused line must fail before it dials or connects.
	cfg := &config.Common{AMQPURL: "amqp://nowhere.invalid/", DatabaseURL: "postgres://nowhere.invalid/x"}
	for _, c := range []struct {
		svc  Service
		args string
		want string // in the error
	}{
		{inventory, "dlq list ordering.stock-events", "inventory consumes inventory.order-placed, not ordering.stock-events"},
		{inventory, "dlq replay notification.stock-events --id x", "not notification.stock-events"},
		{inventory, "dlq list --id x", "takes no --id"},
		{inventory, "dlq list a b", "one queue at a time"},
		{inventory, "dlq purge", `unknown command "dlq purge"`},
		{inventory, "outbox retry-dead --id not-a-uuid", `"not-a-uuid" is not an event id`},
		{inventory, "outbox retry-dead everything", "unexpected everything"},
		{inventory, "outbox list-dead --id 01a22c4e-fc26-7e63-9791-9e45237af125", "takes no --id"},
		{inventory, "outbox retry-dead --nope", "flag provided but not defined"},
		{notification, "outbox list-dead", "notification has no outbox"},
	} {
		var out bytes.Buffer
		err := c.svc.Run(context.Background(), cfg, strings.Fields(c.args), &out)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: error %v, want a usage error containing %q", c.svc.Name, c.args, err, c.want)
		}
	}
}

func TestHelpListsOnlyTheCommandsTheServiceHas(t *testing.T) {
	var out bytes.Buffer
	if err := notification.Run(context.Background(), &config.Common{}, []string{"dlq", "help"}, &out); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{"notification dlq list [notification.stock-events]", "notification dlq replay [notification.stock-events] [--id ID ...]"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "outbox") {
		t.Errorf("help of a service without an outbox lists outbox commands:\n%s", help)
	}
	out.Reset()
	Usage(&out, inventory)
	if !strings.Contains(out.String(), "inventory outbox retry-dead [--id ID ...]") {
		t.Errorf("inventory's help lacks retry-dead:\n%s", out.String())
	}
}
