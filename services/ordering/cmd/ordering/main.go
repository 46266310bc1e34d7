// Command ordering takes orders over HTTP, writes each order and its OrderPlaced event in
// one transaction, relays the events to RabbitMQ and follows inventory's answer.
//
//	ordering          API, outbox relay and stock-events consumer (the default; with
//	                  ORDERING_RELAY=0 the API and the consumer without the relay)
//	ordering relay    the outbox relay alone, to run more relays beside the API, or the
//	                  one relay beside an API started with ORDERING_RELAY=0
//	ordering --help   every environment variable and its default
//	ordering dlq ...     list or replay the stock events its queue dead-lettered (ordering dlq help)
//	ordering outbox ...  list or retry the events its relay parked (ordering outbox help)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/api"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/deadletter"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/parked"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ordering:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, vars := config.Standard("ordering", 8081)
	var publisher, inProcessRelay string
	var concurrency, placedVersion int
	var keyRetention, poolWait time.Duration
	vars = append(vars,
		config.Duration("IDEMPOTENCY_KEY_RETENTION", "24h", "how long POST /orders remembers an Idempotency-Key; a retry after it places a new order", &keyRetention),
		config.Duration("ORDERING_POOL_WAIT", orders.DefaultPoolWait.String(), "how long an API request waits for a database connection; then 503 with Retry-After, nothing done (load shedding)", &poolWait),
		config.String("ORDERING_PUBLISHER", "outbox", "outbox, or direct: commit then publish, no outbox (the wrong way, for demonstrations)", &publisher),
		config.String("ORDERING_RELAY", "1", "1: the API process also runs the outbox relay; 0: the API and the stock-events consumer only, their events left to an `ordering relay` run beside it (make run does with STOREFRONT_DEMOS=1)", &inProcessRelay),
		config.Int("ORDERING_ORDER_PLACED_VERSION", "1", "the version of ordering.order-placed written for a new order: 1, or 2 once every consumer reads v2 (docs/schema-evolution.md)", &placedVersion),
		config.Int("CONSUMER_CONCURRENCY", "4", "stock events handled at once", &concurrency),
	)
	relayCfg, relayVars := outbox.Variables()
	vars = append(vars, relayVars...)
	retry, retryVars := consumer.RetryVariables("10s")
	vars = append(vars, retryVars...)
	if err := config.Parse("ordering", args, getenv, stdout, vars); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return nil
		}
		return err
	}
	mode := "serve"
	if rest := config.Rest(args); len(rest) > 0 {
		if parked.IsCommand(rest[0]) {
			return parked.Run(ctx, parkedCommands, cfg, rest, stdout) // does its work and exits: nothing below starts
		}
		mode = rest[0]
	}
	if mode != "serve" && mode != "relay" {
		return fmt.Errorf("unknown command %q (want none, relay, dlq or outbox)", mode)
	}
	if publisher != "outbox" && publisher != "direct" {
		return fmt.Errorf("ORDERING_PUBLISHER=%q: want outbox or direct", publisher)
	}
	if inProcessRelay != "0" && inProcessRelay != "1" {
		return fmt.Errorf("ORDERING_RELAY=%q: want 1, or 0 to run `ordering relay` as a process of its own", inProcessRelay)
	}
	if mode == "relay" && inProcessRelay == "0" {
		return errors.New("ORDERING_RELAY=0 with the relay command: it would run nothing (the variable is for the API process)")
	}
	if !slices.Contains(orders.OrderPlacedVersions, placedVersion) {
		return fmt.Errorf("ORDERING_ORDER_PLACED_VERSION=%d: want one of %v", placedVersion, orders.OrderPlacedVersions)
	}
	if err := failpoint.Configure(cfg.Failpoints, contracts.Failpoints); err != nil {
		return err
	}

	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "ordering", LogLevel: cfg.LogLevel, OTLPEndpoint: cfg.OTLPEndpoint, Stdout: stdout})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	log := tel.Logger.With("mode", mode)

	// Migrations run before anything listens: no request or event meets an old schema.
	pool, err := pgdb.Open(ctx, cfg.DatabaseAdminURL, cfg.PoolURL(),
		pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"},
		pgdb.Migrations{FS: schema.Ordering, VersionTable: "goose_ordering_version"})
	if err != nil {
		return err
	}
	defer pool.Close()

	// Publishing and consuming on connections of their own: a broker that blocks the
	// publisher (a memory or disk alarm) must not stop the consumer's acks.
	pubConn := broker.NewConn(cfg.AMQPURL, "ordering-"+mode+"-publish")
	defer pubConn.Close()
	pub := relayCfg.Publisher(pubConn, contracts.Topology)
	defer pub.Close()

	ready := []httpapi.Check{
		{Name: "postgres", Ping: pool.Ping},
		{Name: "rabbitmq", Ping: pubConn.Ping},
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpapi.ServeProfiles(ctx, cfg.PprofAddr, log) })
	relayConfig := relayCfg.Config("ordering")
	relayConfig.AfterPublishFailpoint = contracts.RelayAfterPublish
	relay, err := outbox.NewRelay(pool, pub, tel, relayConfig)
	if err != nil {
		return err
	}
	// ORDERING_RELAY=0 leaves the outbox to an `ordering relay` beside this process: the
	// API still writes every row, and they wait pending until that relay publishes them.
	if publisher == "outbox" && inProcessRelay == "1" {
		g.Go(func() error { return relay.Run(ctx) })
		ready = append(ready, httpapi.Check{Name: "relay", Ping: relay.Ready})
	}

	if mode == "relay" {
		addr := cfg.HTTPAddr
		if getenv("HTTP_ADDR") == "" {
			addr = "127.0.0.1:8091" // beside an ordering API on the same machine; loopback, as HTTP_ADDR's default
		}
		g.Go(func() error { return httpapi.Serve(ctx, addr, api.NewProbes(tel, ready...), log, nil) })
		log.InfoContext(ctx, "ordering relay started", "relay_id", relayCfg.ID)
		return g.Wait()
	}

	var events orders.EventWriter // nil: the outbox
	if publisher == "direct" {
		events = directWriter{pub: pub, log: log}
		log.WarnContext(ctx, "ORDERING_PUBLISHER=direct: events are published after commit without an outbox and CAN BE LOST")
	}
	svc := orders.NewService(pool, tel.Tracer("orders"), log, events, placedVersion)
	svc.SetPoolWait(poolWait)
	consumeConn := broker.NewConn(cfg.AMQPURL, "ordering-consume")
	defer consumeConn.Close()
	stockEvents, err := consumer.New(consumeConn, tel, consumer.Config{
		Name:           orders.ConsumerName,
		Queue:          contracts.QueueOrderingStockEvents,
		Topology:       contracts.OrderingTopology,
		Types:          orders.StockEventTypes,
		Concurrency:    concurrency,
		RetryBase:      retry.Base,
		RetryMax:       retry.Max,
		RequeueRefused: retry.OnRefusal == "requeue",
		Healthy:        pool.Ping,
		Batch:          svc.ApplyStockOutcomes,
	}, svc.ApplyStockOutcome)
	if err != nil {
		return err
	}
	if err := deadletter.ObserveDepth(tel, consumeConn, contracts.QueueOrderingStockEvents); err != nil {
		return err
	}
	ready = append(ready, httpapi.Check{Name: "consumer", Ping: stockEvents.Ready})
	g.Go(func() error { return stockEvents.Run(ctx) })
	g.Go(func() error { inbox.RunCleanup(ctx, pool, inbox.Retention, time.Hour, log); return nil })
	g.Go(func() error {
		orders.RunForgetIdempotencyKeys(ctx, pool, keyRetention, time.Minute, log)
		return nil
	})
	g.Go(func() error { return httpapi.Serve(ctx, cfg.HTTPAddr, api.NewServer(svc, tel, ready...), log, nil) })
	log.InfoContext(ctx, "ordering started", "http_addr", cfg.HTTPAddr, "publisher", publisher, "in_process_relay", inProcessRelay == "1")
	return g.Wait()
}
