// Package ops is the operator's command line for what the system parks until someone
// looks: the messages a service's queues dead-lettered (package ops/deadletter) and the
// rows its outbox relay gave up on (ListDeadRows, RetryDeadRows). Nothing else
// brings them back. Every consuming service offers, for its own queues only:
//
//	<service> dlq list [QUEUE]                     what QUEUE dead-lettered, oldest first
//	<service> dlq replay [QUEUE] [--id ID ...]     move it back to QUEUE, after the fix
//	<service> outbox list-dead                     the outbox rows parked as dead
//	<service> outbox retry-dead [--id ID ...]      send them again, with a fresh budget
//
// Each prints a table and exits. Replaying is safe to repeat: the consumer's inbox takes
// a message or event processed already as a duplicate.
package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/ops/deadletter"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
)

// Service is what one service parks.
type Service struct {
	Name   string   // the command's name, e.g. "inventory"
	Queues []string // the queues it consumes: its dlq commands touch no other
	Outbox bool     // it writes an outbox: it has the outbox commands
	// Migrations bring the database's outbox table up to date (at least the platform's
	// set); the outbox commands apply them when they open the database, as run does.
	Migrations []pgdb.Migrations
}

// Handles reports whether arg, the first positional argument of a service, names one of
// these commands.
func (svc Service) Handles(arg string) bool { return arg == "dlq" || arg == "outbox" }

// ErrUsage is wrapped by the errors of a command line these commands do not understand.
var ErrUsage = errors.New("usage")

// Run runs the command in args (starting with "dlq" or "outbox") for svc, against the
// database and broker of cfg, and writes its table to stdout.
func (svc Service) Run(ctx context.Context, cfg *config.Common, args []string, stdout io.Writer) error {
	cmd, err := parse(svc, args)
	if err != nil {
		return err
	}
	switch cmd.name {
	case "help":
		Usage(stdout, svc)
		return nil
	case "dlq list":
		return dlqList(ctx, svc, cfg, cmd.queues, stdout)
	case "dlq replay":
		return dlqReplay(ctx, svc, cfg, cmd.queues[0], cmd.ids, stdout)
	case "outbox list-dead":
		return outboxList(ctx, svc, cfg, stdout)
	case "outbox retry-dead":
		return outboxRetry(ctx, svc, cfg, cmd.ids, stdout)
	}
	return fmt.Errorf("%s: %w: unknown command %q", svc.Name, ErrUsage, cmd.name)
}

// Usage prints the commands svc has.
func Usage(w io.Writer, svc Service) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Commands for what %s parked (each does its work and exits):\n", svc.Name)
	if len(svc.Queues) > 0 {
		q := strings.Join(svc.Queues, "|")
		fmt.Fprintf(tw, "  %s dlq list [%s]\tthe messages the queue dead-lettered, oldest first\n", svc.Name, q)
		fmt.Fprintf(tw, "  %s dlq replay [%s] [--id ID ...]\tmove them (all, or these message ids) back to the queue, after the fix\n", svc.Name, q)
	}
	if svc.Outbox {
		fmt.Fprintf(tw, "  %s outbox list-dead\tthe outbox rows the relay parked after RELAY_MAX_ATTEMPTS refused publishes\n", svc.Name)
		fmt.Fprintf(tw, "  %s outbox retry-dead [--id ID ...]\tsend them (all, or these event ids) again, with a fresh attempt budget\n", svc.Name)
	}
	_ = tw.Flush()
}

// command is a parsed command line.
type command struct {
	name   string   // "dlq list", "outbox retry-dead", "help"
	queues []string // dlq: the queues it acts on
	ids    []string // --id values
}

func parse(svc Service, args []string) (command, error) {
	usage := func(format string, a ...any) (command, error) {
		return command{}, fmt.Errorf("%s: %w: %s (%s %s help lists the commands)", svc.Name, ErrUsage, fmt.Sprintf(format, a...), svc.Name, args[0])
	}
	if len(args) == 0 || !svc.Handles(args[0]) {
		return command{}, fmt.Errorf("%s: %w: want dlq or outbox", svc.Name, ErrUsage)
	}
	if len(args) < 2 || slices.Contains([]string{"help", "-h", "-help", "--help"}, args[1]) {
		return command{name: "help"}, nil
	}
	cmd := command{name: args[0] + " " + args[1]}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("id", "a message or event id; repeat, or separate with commas", func(s string) error {
		for id := range strings.SplitSeq(s, ",") {
			if id = strings.TrimSpace(id); id != "" {
				cmd.ids = append(cmd.ids, id)
			}
		}
		return nil
	})
	// Flags and positional arguments in any order: "replay QUEUE --id X" and
	// "replay --id X QUEUE" both read as meant.
	var positional []string
	rest := args[2:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return command{name: "help"}, nil
			}
			return usage("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}

	switch cmd.name {
	case "dlq list", "dlq replay":
		if len(svc.Queues) == 0 {
			return usage("%s consumes no queue", svc.Name)
		}
		if len(positional) > 1 {
			return usage("one queue at a time, got %s", strings.Join(positional, " "))
		}
		cmd.queues = svc.Queues
		if len(positional) == 1 {
			q := strings.TrimSuffix(positional[0], ".dlq")
			if !slices.Contains(svc.Queues, q) {
				return usage("%s consumes %s, not %s: its own dlq commands reach only its own queues", svc.Name, strings.Join(svc.Queues, ", "), positional[0])
			}
			cmd.queues = []string{q}
		}
		if cmd.name == "dlq list" && len(cmd.ids) > 0 {
			return usage("dlq list takes no --id")
		}
		if cmd.name == "dlq replay" && len(cmd.queues) > 1 {
			return usage("name the queue to replay: %s", strings.Join(svc.Queues, " or "))
		}
	case "outbox list-dead", "outbox retry-dead":
		if !svc.Outbox {
			return usage("%s has no outbox", svc.Name)
		}
		if len(positional) > 0 {
			return usage("unexpected %s", strings.Join(positional, " "))
		}
		if cmd.name == "outbox list-dead" && len(cmd.ids) > 0 {
			return usage("outbox list-dead takes no --id")
		}
		for _, id := range cmd.ids {
			// Validate, not Parse: Parse takes "x<uuid>y" for the {braced} form.
			if err := uuid.Validate(id); err != nil {
				return usage("--id %q is not an event id (a UUID)", id)
			}
		}
	default:
		return usage("unknown command %q", cmd.name)
	}
	return cmd, nil
}

func dlqList(ctx context.Context, svc Service, cfg *config.Common, queues []string, stdout io.Writer) error {
	conn := broker.NewConn(cfg.AMQPURL, svc.Name+"-dlq-list")
	defer conn.Close()
	for _, queue := range queues {
		ch, err := conn.Channel(ctx)
		if err != nil {
			return err
		}
		msgs, err := deadletter.List(ctx, ch, queue)
		_ = ch.Close()
		if err != nil {
			return fmt.Errorf("dlq list %s: %w%s", queue, err, accessHint(err))
		}
		if len(msgs) == 0 {
			fmt.Fprintf(stdout, "%s: empty\n", deadletter.DLQ(queue))
			continue
		}
		fmt.Fprintf(stdout, "%s: %d message(s), oldest first\n", deadletter.DLQ(queue), len(msgs))
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tMESSAGE ID\tTYPE\tROUTING KEY\tREASON\tCOUNT\tFIRST DEAD-LETTERED\tBYTES")
		for i, m := range msgs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\n", i+1, orDash(m.ID), orDash(m.Type), orDash(m.RoutingKey),
				orDash(m.Reason), m.Count, timestamp(m.FirstDeath), m.Size)
		}
		_ = tw.Flush()
		fmt.Fprintf(stdout, "after the fix: %s dlq replay %s [--id ID ...]\n", svc.Name, queue)
	}
	return nil
}

func dlqReplay(ctx context.Context, svc Service, cfg *config.Common, queue string, ids []string, stdout io.Writer) error {
	conn := broker.NewConn(cfg.AMQPURL, svc.Name+"-dlq-replay")
	defer conn.Close()
	ch, err := conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	n, err := deadletter.Replay(ctx, ch, queue, ids...)
	fmt.Fprintf(stdout, "moved %d message(s) from %s back to %s\n", n, deadletter.DLQ(queue), queue)
	if err != nil {
		return fmt.Errorf("dlq replay %s: %w%s", queue, err, accessHint(err))
	}
	return nil
}

func outboxList(ctx context.Context, svc Service, cfg *config.Common, stdout io.Writer) error {
	pool, err := pgdb.Open(ctx, cfg.DatabaseAdminURL, cfg.PoolURL(), svc.Migrations...)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := ListDeadRows(ctx, pool)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no dead outbox rows")
		return nil
	}
	fmt.Fprintf(stdout, "%d dead outbox row(s), oldest first\n", len(rows))
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tTYPE\tAGGREGATE\tSEQ\tATTEMPTS\tBLOCKING\tCREATED\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%d\t%d\t%d\t%s\t%s\n", r.ID, r.EventType, r.AggregateType, r.AggregateID,
			r.Sequence, r.Attempts, r.Blocked, timestamp(r.CreatedAt), orDash(oneLine(r.LastError)))
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "BLOCKING: later events of the aggregate waiting behind the row. After the fix: %s outbox retry-dead [--id ID ...]\n", svc.Name)
	return nil
}

func outboxRetry(ctx context.Context, svc Service, cfg *config.Common, ids []string, stdout io.Writer) error {
	pool, err := pgdb.Open(ctx, cfg.DatabaseAdminURL, cfg.PoolURL(), svc.Migrations...)
	if err != nil {
		return err
	}
	defer pool.Close()
	uuids := make([]uuid.UUID, len(ids))
	for i, id := range ids {
		uuids[i] = uuid.MustParse(id) // checked by parse
	}
	n, err := RetryDeadRows(ctx, pool, uuids...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "moved %d dead outbox row(s) back to pending; a running relay publishes them now\n", n)
	return nil
}

// accessHint explains a refusal by the broker: a service's own user may read only its
// queue and publish only through the events exchange (docker compose's definitions), while
// these commands read the DLQ and publish through the default exchange.
func accessHint(err error) string {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused {
		return " (the dlq commands read <queue>.dlq and publish through the default exchange: give AMQP_URL a user that may, such as the broker's admin)"
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
