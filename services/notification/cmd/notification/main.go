// Command notification consumes the stock events and sends each order's outcome email
// once, through the email provider, with a two-phase record and reconciliation.
//
//	notification          consumer, sweeper and API on :8083
//	notification --help   every environment variable and its default
//	notification dlq ...  list or replay the stock events its queue dead-lettered (notification dlq help)
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
	"github.com/bookstore-go/bookstore/services/notification/internal/api"
	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/notification/internal/provider"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/deadletter"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/parked"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "notification:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, vars := config.Standard("notification", 8083)
	var providerURL string
	var attempts, concurrency int
	var timeout, staleAfter, interval time.Duration
	vars = append(vars,
		config.String("EMAILPROVIDER_URL", "http://127.0.0.1:8084", "base URL of the email provider", &providerURL),
		config.Duration("PROVIDER_TIMEOUT", "2s", "timeout of each provider call; a send that times out is reconciled, not resent blindly", &timeout),
		config.Int("NOTIFICATION_MAX_ATTEMPTS", "30", "provider attempts per email before its record fails and its message is dead-lettered", &attempts),
		config.Duration("RECONCILE_AFTER", "30s", "the sweeper reconciles records left unfinished and untouched this long", &staleAfter),
		config.Duration("SWEEP_INTERVAL", "5s", "how often the sweeper looks for such records", &interval),
		config.Int("CONSUMER_CONCURRENCY", "4", "stock events handled at once", &concurrency),
	)
	retry, retryVars := consumer.RetryVariables("30s")
	vars = append(vars, retryVars...)
	if err := config.Parse("notification", args, getenv, stdout, vars); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return nil
		}
		return err
	}
	if rest := config.Rest(args); len(rest) > 0 {
		if parked.IsCommand(rest[0]) {
			return parked.Run(ctx, parkedCommands, cfg, rest, stdout) // does its work and exits: nothing below starts
		}
		return fmt.Errorf("unknown command %q (notification takes dlq)", rest[0])
	}
	if err := failpoint.Configure(cfg.Failpoints, contracts.Failpoints); err != nil {
		return err
	}

	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "notification", LogLevel: cfg.LogLevel, OTLPEndpoint: cfg.OTLPEndpoint, Stdout: stdout})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	log := tel.Logger

	// Migrations run before anything consumes: no event meets an old schema.
	pool, err := pgdb.Open(ctx, cfg.DatabaseAdminURL, cfg.PoolURL(),
		pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"},
		pgdb.Migrations{FS: schema.Notification, VersionTable: "goose_notification_version"})
	if err != nil {
		return err
	}
	defer pool.Close()

	conn := broker.NewConn(cfg.AMQPURL, "notification-consume")
	defer conn.Close()

	client, err := provider.New(providerURL, timeout, tel)
	if err != nil {
		return err
	}
	svc, err := notifications.NewService(pool, client, notifications.Config{
		MaxAttempts: attempts,
		// One attempt is a lookup and a send, each bounded by the timeout; the margin
		// covers the database writes around them.
		Lease:          2*timeout + 2*time.Second,
		ReconcileAfter: staleAfter,
		SweepInterval:  interval,
	}, tel)
	if err != nil {
		return err
	}
	stockEvents, err := consumer.New(conn, tel, consumer.Config{
		Name:        notifications.ConsumerName,
		Queue:       contracts.QueueNotificationStockEvents,
		Topology:    contracts.NotificationTopology,
		Types:       notifications.StockEventTypes,
		Concurrency: concurrency,
		RetryBase:   retry.Base,
		// A provider outage is ridden out by requeueing with backoff; up to 30 s between
		// tries (CONSUMER_RETRY_MAX), 30 attempts last about eight minutes before an email
		// is given up.
		RetryMax:       retry.Max,
		RequeueRefused: retry.OnRefusal == "requeue",
		// Its database down is an outage: the consumer pauses and spends no delivery.
		Healthy: pool.Ping,
		Batch:   svc.HandleStockEvents,
	}, svc.HandleStockEvent)
	if err != nil {
		return err
	}
	if err := deadletter.ObserveDepth(tel, conn, contracts.QueueNotificationStockEvents); err != nil {
		return err
	}

	// The provider is not a readiness check: it is a third party whose outage we ride out
	// by retrying, not a reason to take this service out of rotation.
	ready := []httpapi.Check{
		{Name: "postgres", Ping: pool.Ping},
		{Name: "rabbitmq", Ping: conn.Ping},
		{Name: "consumer", Ping: stockEvents.Ready},
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpapi.ServeProfiles(ctx, cfg.PprofAddr, log) })
	g.Go(func() error { return stockEvents.Run(ctx) })
	g.Go(func() error { svc.RunSweeper(ctx); return nil })
	g.Go(func() error { inbox.RunCleanup(ctx, pool, inbox.Retention, time.Hour, log); return nil })
	g.Go(func() error { return httpapi.Serve(ctx, cfg.HTTPAddr, api.NewServer(svc, tel, ready...), log, nil) })
	log.InfoContext(ctx, "notification started", "http_addr", cfg.HTTPAddr, "emailprovider_url", providerURL,
		"provider_timeout", timeout.String(), "max_attempts", attempts, "reconcile_after", staleAfter.String())
	return g.Wait()
}
