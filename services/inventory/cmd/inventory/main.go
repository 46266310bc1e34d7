// Command inventory reserves stock for the orders ordering announces, exactly once per
// order, and announces the outcome through its own outbox.
//
//	inventory          HTTP API, order-placed consumer and outbox relay
//	inventory --help   every environment variable and its default
//	inventory dlq ...     list or replay the orders its queue dead-lettered (inventory dlq help)
//	inventory outbox ...  list or retry the answers its relay parked (inventory outbox help)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/api"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/ops"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, vars := config.Standard("inventory", 8082)
	var strategyName, admin, cancellations string
	var concurrency int
	vars = append(vars,
		config.String("INVENTORY_STRATEGY", "inbox", "inbox, or the wrong ways for demonstrations: check-then-process (double-reserves after a crash between work and record) or naive (double-reserves on every redelivery)", &strategyName),
		config.String("INVENTORY_CANCELLATIONS", "sequence", "sequence, or the wrong way for demonstrations: ignore-sequence (a cancellation that overtakes its placement leaves no tombstone, so the late placement reserves for a cancelled order)", &cancellations),
		config.String("INVENTORY_ADMIN", "0", "1: allow PUT /books/{id}, which creates books and sets their stock", &admin),
		config.Int("CONSUMER_CONCURRENCY", "4", "orders handled at once", &concurrency),
	)
	relayCfg, relayVars := outbox.EnvVariables()
	vars = append(vars, relayVars...)
	retry, retryVars := consumer.RetryVariables("10s")
	vars = append(vars, retryVars...)
	if err := config.Parse("inventory", args, getenv, stdout, vars); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return nil
		}
		return err
	}
	if rest := config.Rest(args); len(rest) > 0 {
		if ops.IsCommand(rest[0]) {
			return ops.Run(ctx, parkedCommands, cfg, rest, stdout) // does its work and exits: nothing below starts
		}
		return fmt.Errorf("unknown command %q (inventory takes dlq or outbox)", rest[0])
	}
	strategy, err := wrongways.ParseStrategy(strategyName)
	if err != nil {
		return err
	}
	if cancellations != "sequence" && cancellations != "ignore-sequence" {
		return fmt.Errorf("INVENTORY_CANCELLATIONS=%q: want sequence or ignore-sequence", cancellations)
	}
	if admin != "0" && admin != "1" {
		return fmt.Errorf("INVENTORY_ADMIN=%q: want 0 or 1", admin)
	}
	if err := failpoint.Configure(cfg.Failpoints, contracts.Failpoints); err != nil {
		return err
	}

	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "inventory", LogLevel: cfg.LogLevel, OTLPEndpoint: cfg.OTLPEndpoint, Stdout: stdout})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	log := tel.Logger

	// Migrations (and the seeded catalogue) before anything listens: no order meets an
	// empty or old schema.
	pool, err := pgdb.Open(ctx, cfg.DatabaseAdminURL, cfg.PoolURL(), stock.Migrations...)
	if err != nil {
		return err
	}
	defer pool.Close()

	// Publishing and consuming on connections of their own: a broker that blocks the
	// publisher (a memory or disk alarm) must not stop the consumer's acks.
	pubConn := broker.NewConn(cfg.AMQPURL, "inventory-publish")
	defer pubConn.Close()
	pub := relayCfg.Publisher(pubConn, contracts.Topology)
	defer pub.Close()
	consumeConn := broker.NewConn(cfg.AMQPURL, "inventory-consume")
	defer consumeConn.Close()

	svc, err := stock.NewService(pool, tel, stock.Options{})
	if err != nil {
		return err
	}
	handle, err := orderHandler(pool, tel, svc, strategy, cancellations)
	if err != nil {
		return err
	}
	relayConfig := relayCfg.Config("inventory")
	relayConfig.AfterPublishFailpoint = contracts.RelayAfterPublish
	relay, err := outbox.NewRelay(pool, pub, tel, relayConfig)
	if err != nil {
		return err
	}
	ordersCfg := consumer.Config{
		Name:           stock.ConsumerName,
		Queue:          contracts.QueueInventoryOrderPlaced,
		Topology:       contracts.InventoryTopology,
		Types:          stock.OrderEventTypes,
		Concurrency:    concurrency,
		RetryBase:      retry.Base,
		RetryMax:       retry.Max,
		RequeueRefused: retry.OnRefusal == "requeue",
		Healthy:        pool.Ping,
	}
	if strategy == wrongways.Inbox {
		// Orders that arrive together are reserved in one transaction. The wrong
		// strategies stay one message at a time, as the demonstrations show them.
		ordersCfg.Batch = svc.HandleOrderEvents
	}
	orders, err := consumer.New(consumeConn, tel, ordersCfg, handle)
	if err != nil {
		return err
	}
	if err := consumer.ObserveDeadLetters(tel, consumeConn, contracts.QueueInventoryOrderPlaced); err != nil {
		return err
	}
	ready := []httpapi.Check{
		{Name: "postgres", Ping: pool.Ping},
		{Name: "rabbitmq", Ping: pubConn.Ping},
		{Name: "consumer", Ping: orders.Ready},
		{Name: "relay", Ping: relay.Ready},
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpapi.ServeProfiles(ctx, cfg.PprofAddr, log) })
	g.Go(func() error { return relay.Run(ctx) })
	g.Go(func() error { return orders.Run(ctx) })
	g.Go(func() error { inbox.RunCleanup(ctx, pool, inbox.Retention, time.Hour, log); return nil })
	handler := api.NewServer(svc, admin == "1", tel, ready...)
	g.Go(func() error { return httpapi.Serve(ctx, cfg.HTTPAddr, handler, log, nil) })
	if strategy != wrongways.Inbox {
		log.WarnContext(ctx, "INVENTORY_STRATEGY is not inbox: redelivered orders CAN BE RESERVED TWICE", "strategy", strategy)
	}
	log.InfoContext(ctx, "inventory started", "http_addr", cfg.HTTPAddr, "strategy", strategy, "admin", admin == "1")
	return g.Wait()
}
