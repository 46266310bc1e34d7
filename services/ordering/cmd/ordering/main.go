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
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/ordering/internal/api"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/ordering/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/service"
	platformways "github.com/bookstore-go/bookstore/services/platform/wrongways"
)

func main() { service.Main("ordering", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s := service.New(service.Spec{Name: "ordering", Port: 8081, Postgres: true, RabbitMQ: true,
		Failpoints: contracts.Failpoints, Commands: parkedCommands})
	defer s.Close()
	var publisher string
	var inProcessRelay bool
	var concurrency, placedVersion int
	var keyRetention, poolWait time.Duration
	s.Vars(
		config.Duration("IDEMPOTENCY_KEY_RETENTION", "24h", "how long POST /orders remembers an Idempotency-Key; a retry after it places a new order", &keyRetention),
		config.Duration("ORDERING_POOL_WAIT", orders.DefaultPoolWait.String(), "how long an API request waits for a database connection; then 503 with Retry-After, nothing done (load shedding)", &poolWait),
		config.OneOf("ORDERING_PUBLISHER", "outbox", "outbox, or direct: commit then publish, no outbox (the wrong way, for demonstrations)", []string{"outbox", "direct"}, &publisher),
		config.Bool("ORDERING_RELAY", "1", "1: the API process also runs the outbox relay; 0: the API and the stock-events consumer only, their events left to an `ordering relay` run beside it (make run does with STOREFRONT_DEMOS=1)", &inProcessRelay),
		config.Int("ORDERING_ORDER_PLACED_VERSION", "1", "the version of ordering.order-placed written for a new order: 1, or 2 once every consumer reads v2 (docs/schema-evolution.md)", &placedVersion),
		config.Int("CONSUMER_CONCURRENCY", "4", "stock events handled at once", &concurrency),
	)
	relaySettings := s.RelayVariables()
	relayWays, vars := platformways.RelayVariables()
	s.Vars(vars...)
	s.RetryVariables("10s")
	consumerWays, vars := platformways.ConsumerVariables()
	s.Vars(vars...)
	if done, err := s.Parse(ctx, args, getenv, stdout); done {
		return err // --help, an operator command (dlq, outbox) or a wrong variable
	}
	mode := cmp.Or(s.Command(), "serve")
	if mode != "serve" && mode != "relay" {
		return fmt.Errorf("unknown command %q (want none, relay, dlq or outbox)", mode)
	}
	if mode == "relay" && !inProcessRelay {
		return errors.New("ORDERING_RELAY=0 with the relay command: it would run nothing (the variable is for the API process)")
	}
	if !slices.Contains(orders.OrderPlacedVersions, placedVersion) {
		return fmt.Errorf("ORDERING_ORDER_PLACED_VERSION=%d: want one of %v", placedVersion, orders.OrderPlacedVersions)
	}

	tel, err := s.Begin(ctx, "mode", mode)
	if err != nil {
		return err
	}
	pool, err := s.Database(ctx, orders.Migrations...)
	if err != nil {
		return err
	}
	pub := s.Publisher(s.BrokerConn(mode+"-publish"), relayWays.Topology(contracts.Topology))
	outboxRelay, err := s.Relay(pool, pub, contracts.RelayAfterPublish)
	if err != nil {
		return err
	}
	relay := relayWays.Relay(outboxRelay, relaySettings.ID, pool)
	// ORDERING_RELAY=0 leaves the outbox to an `ordering relay` beside this process: the
	// API still writes every row, and they wait pending until that relay publishes them.
	if publisher == "outbox" && inProcessRelay {
		s.Go(relay.Run, httpapi.Check{Name: "relay", Ping: relay.Ready})
	}

	if mode == "relay" {
		if getenv("HTTP_ADDR") == "" {
			s.Config.HTTPAddr = "127.0.0.1:8091" // beside an ordering API on the same machine; loopback, as HTTP_ADDR's default
		}
		s.Serve(api.NewProbes(tel, s.Checks()...))
		s.Log.InfoContext(ctx, "ordering relay started", "relay_id", relaySettings.ID)
		return s.Wait(ctx)
	}

	svc := orders.NewService(pool, tel.Tracer("orders"), s.Log, placedVersion)
	svc.SetPoolWait(poolWait)
	err = s.Consume(s.BrokerConn("consume"), consumer.Config{
		Name:        orders.ConsumerName,
		Queue:       contracts.QueueOrderingStockEvents,
		Producer:    contracts.Producers[contracts.QueueOrderingStockEvents],
		Topology:    contracts.OrderingTopology,
		Types:       orders.StockEventTypes,
		Concurrency: concurrency,
		Batch:       svc.ApplyStockOutcomes,
	}, consumerWays.Handler(svc.ApplyStockOutcome))
	if err != nil {
		return err
	}
	s.Loop(func(ctx context.Context) {
		orders.RunForgetIdempotencyKeys(ctx, pool, keyRetention, time.Minute, s.Log)
	})
	var uses api.Orders = svc
	if publisher == "direct" {
		uses = wrongways.NewOrders(svc, pool, wrongways.CommitThenPublish{Pub: pub}, placedVersion, s.Log)
		s.Log.WarnContext(ctx, "ORDERING_PUBLISHER=direct: events are published after commit without an outbox and CAN BE LOST")
	}
	s.Serve(api.NewServer(uses, tel, s.Checks()...))
	s.Log.InfoContext(ctx, "ordering started", "http_addr", s.Config.HTTPAddr, "publisher", publisher, "in_process_relay", inProcessRelay)
	return s.Wait(ctx)
}
