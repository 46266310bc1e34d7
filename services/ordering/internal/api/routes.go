// Package api is ordering's HTTP API. routes.go maps all of it; orders.go holds the
// handlers, each decoding, validating and calling one use case of package orders.
package api

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Orders is the use cases the API calls, one per route: orders.Service's, whose changes
// write their events into the outbox, or the wrong way's that ORDERING_PUBLISHER=direct
// puts in its place (package wrongways). The API answers both alike.
type Orders interface {
	PlaceOrder(ctx context.Context, key string, req orders.PlaceOrderRequest) (orders.Answer, error)
	GetOrder(ctx context.Context, id uuid.UUID) (orders.Order, error)
	OrderEvents(ctx context.Context, id uuid.UUID) ([]outbox.AggregateEvent, error)
	CancelOrder(ctx context.Context, key string, id uuid.UUID) (orders.Answer, error)
}

// NewServer returns ordering's whole HTTP API.
func NewServer(svc Orders, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := httpapi.NewRouter()
	r.Post("/orders", placeOrder(svc, tel))
	r.Get("/orders/{id}", getOrder(svc, tel))
	r.Get("/orders/{id}/events", getOrderEvents(svc, tel))
	r.Post("/orders/{id}/cancel", cancelOrder(svc, tel))
	httpapi.Document(r, apidocs.OpenAPI("ordering"))
	httpapi.Probes(r, tel, ready...)
	return httpapi.Instrument(tel, r)
}

// NewProbes returns only the health, readiness and metrics endpoints, for a process that
// runs the relay alone.
func NewProbes(tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := httpapi.NewRouter()
	httpapi.Probes(r, tel, ready...)
	return httpapi.Instrument(tel, r)
}
