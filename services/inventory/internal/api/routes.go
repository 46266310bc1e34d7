// Package api is inventory's HTTP API. routes.go maps all of it; books.go holds the
// handlers, each decoding, validating and calling one use case of package stock.
package api

import (
	"net/http"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// NewServer returns inventory's whole HTTP API. adminEnabled allows PUT /books/{id}.
func NewServer(svc *stock.Service, adminEnabled bool, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := httpapi.NewRouter()
	r.Get("/books", listBooks(svc, tel))
	r.Get("/books/{id}", getBook(svc, tel))
	r.Put("/books/{id}", putBook(svc, adminEnabled, tel))
	r.Get("/orders/{id}/reservation", getReservation(svc, tel))
	httpapi.Document(r, apidocs.OpenAPI("inventory"))
	httpapi.Probes(r, tel, ready...)
	return httpapi.Instrument(tel, r)
}
