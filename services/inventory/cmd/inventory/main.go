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
	"fmt"
	"io"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/api"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/service"
	platformways "github.com/bookstore-go/bookstore/services/platform/wrongways"
)

func main() { service.Main("inventory", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s := service.New(service.Spec{Name: "inventory", Port: 8082, Postgres: true, RabbitMQ: true,
		Failpoints: contracts.Failpoints, Commands: parkedCommands})
	defer s.Close()
	var strategyName, cancellations string
	var admin bool
	var concurrency int
	s.Vars(
		config.OneOf("INVENTORY_STRATEGY", "inbox", "inbox, or the wrong ways for demonstrations: check-then-process (double-reserves after a crash between work and record) or naive (double-reserves on every redelivery)",
			[]string{string(wrongways.Inbox), string(wrongways.CheckThenProcess), string(wrongways.Naive)}, &strategyName),
		config.OneOf("INVENTORY_CANCELLATIONS", "sequence", "sequence, or the wrong way for demonstrations: ignore-sequence (a cancellation that overtakes its placement leaves no tombstone, so the late placement reserves for a cancelled order)",
			[]string{"sequence", "ignore-sequence"}, &cancellations),
		config.Bool("INVENTORY_ADMIN", "0", "1: allow PUT /books/{id}, which creates books and sets their stock", &admin),
		config.Int("CONSUMER_CONCURRENCY", "4", "orders handled at once", &concurrency),
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
	if cmd := s.Command(); cmd != "" {
		return fmt.Errorf("unknown command %q (inventory takes dlq or outbox)", cmd)
	}
	strategy := wrongways.Strategy(strategyName)

	tel, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	// The migrations seed the catalogue too: no order meets an empty or old schema.
	pool, err := s.Database(ctx, stock.Migrations...)
	if err != nil {
		return err
	}
	pub := s.Publisher(s.BrokerConn("publish"), relayWays.Topology(contracts.Topology))
	consumeConn := s.BrokerConn("consume")
	svc, err := stock.NewService(pool, tel, stock.Options{})
	if err != nil {
		return err
	}
	handle, err := orderHandler(pool, tel, svc, strategy, cancellations)
	if err != nil {
		return err
	}
	outboxRelay, err := s.Relay(pool, pub, contracts.RelayAfterPublish)
	if err != nil {
		return err
	}
	relay := relayWays.Relay(outboxRelay, relaySettings.ID, pool)
	ordersCfg := consumer.Config{
		Name:        stock.ConsumerName,
		Queue:       contracts.QueueInventoryOrderPlaced,
		Producer:    contracts.Producers[contracts.QueueInventoryOrderPlaced],
		Topology:    contracts.InventoryTopology,
		Types:       stock.OrderEventTypes,
		Concurrency: concurrency,
	}
	if strategy == wrongways.Inbox {
		// Orders that arrive together are reserved in one transaction. The wrong
		// strategies stay one message at a time, as the demonstrations show them.
		ordersCfg.Batch = svc.HandleOrderEvents
	}
	if err := s.Consume(consumeConn, ordersCfg, consumerWays.Handler(handle)); err != nil {
		return err
	}
	s.Go(relay.Run, httpapi.Check{Name: "relay", Ping: relay.Ready})
	s.Loop(func(ctx context.Context) { stock.RunLevelCleanup(ctx, pool, time.Minute, s.Log) })
	s.Serve(api.NewServer(svc, admin, tel, s.Checks()...))
	if strategy != wrongways.Inbox {
		s.Log.WarnContext(ctx, "INVENTORY_STRATEGY is not inbox: redelivered orders CAN BE RESERVED TWICE", "strategy", strategy)
	}
	s.Log.InfoContext(ctx, "inventory started", "http_addr", s.Config.HTTPAddr, "strategy", strategy, "admin", admin)
	return s.Wait(ctx)
}
