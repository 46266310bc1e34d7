// Package api is ordering's HTTP API. routes.go maps all of it; orders.go holds the
// handlers, each decoding, validating and calling one use case of package orders.
package api

import (
	"net/http"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// NewServer returns ordering's whole HTTP API.
func NewServer(svc *orders.Service, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
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
