package ops

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// FuzzOperatorCommandLineIsACommandOrAUsageError: whatever an operator types after the
// service's name (the arguments one a line), parse does not panic, and either refuses it
// with ErrUsage before anything is opened, or returns a command the service has: dlq
// commands on its own queues only (replay on exactly one), outbox commands only where
// it has an outbox, --id only where the command takes ids, each id non-empty and
// trimmed, and an outbox id a UUID.
func FuzzOperatorCommandLineIsACommandOrAUsageError(f *testing.F) {
	const id = "01a22c4e-fc26-7e63-9791-9e45237af125"
	for _, seed := range []string{
		"dlq\nlist",
		"dlq\nlist\ninventory.order-placed.dlq",
		"dlq\nreplay\ninventory.order-placed\n--id\na\n--id\nb,c",
		"dlq\nreplay\n--id=a\ninventory.order-placed",
		"dlq\nreplay\n--id= , ,",
		"dlq\nreplay\nnotification.stock-events",
		"dlq\nreplay\ninventory.order-placed\ninventory.order-placed",
		"dlq\nlist\n--id\na",
		"outbox\nretry-dead\n--id\n" + id + "," + strings.ToUpper(id),
		"outbox\nretry-dead\n--id\nnot-a-uuid",
		"outbox\nretry-dead\n--id\nx" + id + "y",
		"outbox\nretry-dead\n--id\n" + id + "\x00",
		"outbox\nlist-dead\nextra",
		"outbox\nlist-dead\n--id\n" + id,
		"outbox\n--help",
		"dlq\nreplay\n-h",
		"dlq\nreplay\n--",
		"dlq\nreplay\n--\n--id",
		"dlq\nreplay\n-id\n",
		"dlq\nreplay\n--id",
		"dlq\nexplode",
		"dlq",
		"",
		"\n",
		"DLQ\nlist",
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, line string, withOutbox bool) {
		svc := inventory
		if !withOutbox {
			svc = notification
		}
		var args []string
		if line != "" {
			args = strings.Split(line, "\n")
		}
		cmd, err := parse(svc, args)
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("%q: an error that is not a usage error: %v", args, err)
			}
			return
		}
		for _, id := range cmd.ids {
			if id == "" || id != strings.TrimSpace(id) || strings.Contains(id, ",") {
				t.Fatalf("%q: the id %q", args, id)
			}
		}
		switch cmd.name {
		case "help":
		case "dlq list", "dlq replay":
			if len(cmd.queues) == 0 {
				t.Fatalf("%q: %s on no queue", args, cmd.name)
			}
			for _, q := range cmd.queues {
				if !slices.Contains(svc.Queues, q) {
					t.Fatalf("%q: %s on %q, not %s's", args, cmd.name, q, svc.Name)
				}
			}
			if cmd.name == "dlq replay" && len(cmd.queues) != 1 {
				t.Fatalf("%q: replay on %v", args, cmd.queues)
			}
			if cmd.name == "dlq list" && len(cmd.ids) > 0 {
				t.Fatalf("%q: dlq list with ids %v", args, cmd.ids)
			}
		case "outbox list-dead", "outbox retry-dead":
			if !svc.Outbox {
				t.Fatalf("%q: %s for %s, which has no outbox", args, cmd.name, svc.Name)
			}
			if cmd.name == "outbox list-dead" && len(cmd.ids) > 0 {
				t.Fatalf("%q: list-dead with ids %v", args, cmd.ids)
			}
			for _, id := range cmd.ids {
				if err := uuid.Validate(id); err != nil {
					t.Fatalf("%q: retry-dead of %q, not an event id", args, id)
				}
			}
		default:
			t.Fatalf("%q: the command %q", args, cmd.name)
		}
	})
}
