package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/config"
)

func noEnv(string) string { return "" }

// helpNames returns the variable names of a --help table, in order.
func helpNames(t *testing.T, s *Start) []string {
	t.Helper()
	var out strings.Builder
	done, err := s.Parse(t.Context(), []string{"--help"}, noEnv, &out)
	if !done || err != nil {
		t.Fatalf("--help: done %v, err %v; want done and no error", done, err)
	}
	var names []string
	for _, line := range strings.Split(out.String(), "\n")[3:] {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

func TestHelpListsTheStandardVariablesTheServiceReadsThenItsOwn(t *testing.T) {
	var level string
	own := config.String("SHOP_LEVEL", "1", "a variable of the service's own", &level)
	for _, tc := range []struct {
		spec Spec
		want []string
	}{
		{Spec{Name: "page", Port: 9000},
			[]string{"HTTP_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "LOG_LEVEL", "PPROF_ADDR", "SHOP_LEVEL"}},
		{Spec{Name: "ledger", Port: 9001, Postgres: true},
			[]string{"DATABASE_URL", "DATABASE_ADMIN_URL", "DATABASE_MAX_CONNS", "HTTP_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "LOG_LEVEL", "PPROF_ADDR", "SHOP_LEVEL"}},
		{Spec{Name: "shop", Port: 9002, Postgres: true, RabbitMQ: true, Failpoints: []string{"shop/after-sale"}},
			[]string{"DATABASE_URL", "DATABASE_ADMIN_URL", "DATABASE_MAX_CONNS", "AMQP_URL", "HTTP_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT", "LOG_LEVEL", "BOOKSTORE_FAILPOINTS", "PPROF_ADDR", "SHOP_LEVEL"}},
	} {
		s := New(tc.spec)
		s.Vars(own)
		if got := helpNames(t, s); !slices.Equal(got, tc.want) {
			t.Errorf("%s --help lists %v, want %v", tc.spec.Name, got, tc.want)
		}
	}
}

func TestRelayAndRetryVariablesFollowTheServicesOwnInTheOrderDeclared(t *testing.T) {
	var level string
	s := New(Spec{Name: "shop", Port: 9002})
	s.Vars(config.String("SHOP_LEVEL", "1", "", &level))
	s.RelayVariables()
	s.RetryVariables("10s")
	got := helpNames(t, s)
	own := slices.Index(got, "SHOP_LEVEL")
	relay := slices.Index(got, "RELAY_ID")
	retry := slices.Index(got, "CONSUMER_RETRY_MAX")
	if own < 0 || relay < own || retry < relay {
		t.Errorf("--help lists %v: want SHOP_LEVEL, then RELAY_*, then CONSUMER_*", got)
	}
}

func TestParseGoesOnWithAPositionalCommandAndStopsAtAWrongVariable(t *testing.T) {
	s := New(Spec{Name: "shop", Port: 9002})
	done, err := s.Parse(t.Context(), []string{"replica"}, noEnv, nil)
	if done || err != nil || s.Command() != "replica" {
		t.Errorf("Parse(replica) = done %v, err %v, command %q; want the command to go on with", done, err, s.Command())
	}

	s = New(Spec{Name: "shop", Port: 9002})
	done, err = s.Parse(t.Context(), nil, func(k string) string { return map[string]string{"HTTP_ADDR": "127.0.0.1:1"}[k] }, nil)
	if done || err != nil || s.Command() != "" || s.Config.HTTPAddr != "127.0.0.1:1" {
		t.Errorf("Parse() = done %v, err %v, command %q, HTTP_ADDR %q", done, err, s.Command(), s.Config.HTTPAddr)
	}

	var n int
	s = New(Spec{Name: "shop", Port: 9002})
	s.Vars(config.Int("SHOP_N", "1", "", &n))
	done, err = s.Parse(t.Context(), nil, func(k string) string { return map[string]string{"SHOP_N": "none"}[k] }, nil)
	if !done || err == nil || !strings.Contains(err.Error(), "SHOP_N") {
		t.Errorf("Parse with SHOP_N=none = done %v, err %v; want done with an error naming SHOP_N", done, err)
	}
}

func TestOperatorCommandsRunOnlyForAServiceThatParks(t *testing.T) {
	s := New(Spec{Name: "shop", Port: 9002, RabbitMQ: true, Commands: dlqCommand{}})
	var out strings.Builder
	done, err := s.Parse(t.Context(), []string{"dlq", "help"}, noEnv, &out)
	if !done || err != nil || out.String() != "dlq help ran\n" {
		t.Errorf("shop dlq help = done %v, err %v, output %q; want the dlq usage and nothing started", done, err, out.String())
	}

	s = New(Spec{Name: "page", Port: 9000})
	done, err = s.Parse(t.Context(), []string{"dlq", "help"}, noEnv, &out)
	if done || err != nil || s.Command() != "dlq" {
		t.Errorf("page dlq help = done %v, err %v, command %q; want dlq left to the service to refuse", done, err, s.Command())
	}
}

func TestTheFirstBrokerConnectionIsTheOneReadinessChecks(t *testing.T) {
	s := New(Spec{Name: "shop", Port: 9002, RabbitMQ: true})
	defer s.Close()
	s.BrokerConn("publish")
	s.BrokerConn("consume")
	var names []string
	for _, c := range s.Checks() {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"rabbitmq"}) {
		t.Errorf("checks = %v, want one rabbitmq check", names)
	}
}

func TestWaitStopsEveryTaskWhenOneFails(t *testing.T) {
	s := New(Spec{Name: "shop", Port: 9002})
	failed := errors.New("relay gave up")
	stopped := make(chan struct{})
	s.Go(func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil })
	s.Loop(func(ctx context.Context) { <-ctx.Done() })
	s.Go(func(context.Context) error { return failed })
	if err := s.Wait(t.Context()); !errors.Is(err, failed) {
		t.Errorf("Wait = %v, want the failed task's error", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("Wait returned before the other tasks stopped")
	}
}

func TestCloseClosesTheLastOpenedFirst(t *testing.T) {
	s := New(Spec{Name: "shop", Port: 9002})
	var order []string
	s.onClose(func() { order = append(order, "telemetry") })
	s.onClose(func() { order = append(order, "database") })
	s.onClose(func() { order = append(order, "connection") })
	s.Close()
	s.Close() // a second Close closes nothing twice
	if want := []string{"connection", "database", "telemetry"}; !slices.Equal(order, want) {
		t.Errorf("closed %v, want %v", order, want)
	}
}

func TestBeginRefusesAFailpointTheSystemDoesNotHave(t *testing.T) {
	s := New(Spec{Name: "shop", Port: 9002, Failpoints: []string{"shop/after-sale"}})
	defer s.Close()
	env := map[string]string{"BOOKSTORE_FAILPOINTS": "shop/nowhere=error"}
	if done, err := s.Parse(t.Context(), nil, func(k string) string { return env[k] }, nil); done {
		t.Fatalf("Parse: %v", err)
	}
	if _, err := s.Begin(t.Context()); err == nil {
		t.Error("Begin armed a failpoint the system does not name")
	}
}

// dlqCommand is an operator command line that knows one word, dlq, and says it ran.
type dlqCommand struct{}

func (dlqCommand) Handles(arg string) bool { return arg == "dlq" }

func (dlqCommand) Run(_ context.Context, _ *config.Common, args []string, stdout io.Writer) error {
	_, err := fmt.Fprintln(stdout, strings.Join(args, " ")+" ran")
	return err
}

// An AMQP_URL that can never be dialled (here an empty host in a list of nodes) stops
// the service at start, with the variable's name and without its password; a list of
// nodes that can be dialled starts.
func TestAServiceRefusesAnAMQPURLItCouldNeverDialAtStartWithoutItsPassword(t *testing.T) {
	env := func(url string) func(string) string {
		return func(k string) string { return map[string]string{"AMQP_URL": url}[k] }
	}
	s := New(Spec{Name: "shop", Port: 9002, RabbitMQ: true})
	done, err := s.Parse(t.Context(), nil, env("amqp://shop:s3cret-pw@node1:5672,,node2:5672/"), nil)
	if !done || err == nil || !strings.Contains(err.Error(), "AMQP_URL") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Parse with an empty node = done %v, err %v; want done, an error naming AMQP_URL and not the password", done, err)
	}
	s = New(Spec{Name: "shop", Port: 9002, RabbitMQ: true})
	if done, err := s.Parse(t.Context(), nil, env("amqp://shop:pw@node1:5672,node2:5672/shop?load_balance_hosts=random"), nil); done || err != nil {
		t.Errorf("Parse with two nodes = done %v, err %v; want to go on", done, err)
	}
}
