package main

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/inventory/internal/wrongways"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// orderHandler is the consumer's handler INVENTORY_STRATEGY and INVENTORY_CANCELLATIONS
// choose: stock's, or one that takes the wrong ways they name.
func orderHandler(pool *pgxpool.Pool, tel *telemetry.Telemetry, svc *stock.Service, strategy wrongways.Strategy, cancellations string) (consumer.Handler, error) {
	if strategy == wrongways.Inbox && cancellations == "sequence" {
		return svc.HandleOrderEvent, nil
	}
	wrong, err := wrongways.New(pool, tel, svc, wrongways.Options{Strategy: strategy, IgnoreSequence: cancellations == "ignore-sequence"})
	if err != nil {
		return nil, err
	}
	return wrong.HandleOrderEvent, nil
}
