// Command notification consumes the stock events and sends each order's outcome email
// once, through the email provider, with a two-phase record and reconciliation.
//
//	notification          consumer, sweeper and API on :8083
//	notification --help   every environment variable and its default
//	notification dlq ...  list or replay the stock events its queue dead-lettered (notification dlq help)
package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/notification/internal/api"
	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/notification/internal/provider"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/service"
	"github.com/bookstore-go/bookstore/services/platform/wrongways"
)

func main() { service.Main("notification", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s := service.New(service.Spec{Name: "notification", Port: 8083, Postgres: true, RabbitMQ: true,
		Failpoints: contracts.Failpoints, Commands: parkedCommands})
	defer s.Close()
	var providerURL, providerKey string
	var attempts, concurrency int
	var timeout, staleAfter, interval time.Duration
	s.Vars(
		config.String("EMAILPROVIDER_URL", "http://127.0.0.1:8084", "base URL of the email provider", &providerURL),
		config.String("EMAILPROVIDER_API_KEY", "", "notification's API key at the provider (one of its EMAILPROVIDER_API_KEYS); required", &providerKey),
		config.Duration("PROVIDER_TIMEOUT", "2s", "timeout of each provider call; a send that times out is reconciled, not resent blindly", &timeout),
		config.Int("NOTIFICATION_MAX_ATTEMPTS", "30", "provider attempts per email before its record fails and its message is dead-lettered", &attempts),
		config.Duration("RECONCILE_AFTER", "30s", "the sweeper reconciles records left unfinished and untouched this long", &staleAfter),
		config.Duration("SWEEP_INTERVAL", "5s", "how often the sweeper looks for such records", &interval),
		config.Int("CONSUMER_CONCURRENCY", "4", "stock events handled at once", &concurrency),
	)
	// A provider outage is ridden out by requeueing with backoff: up to 30 s between tries
	// (CONSUMER_RETRY_MAX), 30 attempts last about eight minutes before an email is given up.
	s.RetryVariables("30s")
	consumerWays, vars := wrongways.ConsumerVariables()
	s.Vars(vars...)
	if done, err := s.Parse(ctx, args, getenv, stdout); done {
		return err // --help, an operator command (dlq) or a wrong variable
	}
	if cmd := s.Command(); cmd != "" {
		return fmt.Errorf("unknown command %q (notification takes dlq)", cmd)
	}

	tel, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	pool, err := s.Database(ctx, notifications.Migrations...)
	if err != nil {
		return err
	}
	conn := s.BrokerConn("consume")
	client, err := provider.New(providerURL, providerKey, timeout, tel)
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
	err = s.Consume(conn, consumer.Config{
		Name:        notifications.ConsumerName,
		Queue:       contracts.QueueNotificationStockEvents,
		Producer:    contracts.Producers[contracts.QueueNotificationStockEvents],
		Topology:    contracts.NotificationTopology,
		Types:       notifications.StockEventTypes,
		Concurrency: concurrency,
		Batch:       svc.HandleStockEvents,
	}, consumerWays.Handler(svc.HandleStockEvent))
	if err != nil {
		return err
	}
	s.Loop(svc.RunSweeper)
	// The provider is not a readiness check: it is a third party whose outage we ride out
	// by retrying, not a reason to take this service out of rotation.
	s.Serve(api.NewServer(svc, tel, s.Checks()...))
	s.Log.InfoContext(ctx, "notification started", "http_addr", s.Config.HTTPAddr, "emailprovider_url", providerURL,
		"provider_timeout", timeout.String(), "max_attempts", attempts, "reconcile_after", staleAfter.String())
	return s.Wait(ctx)
}
