// Package api is inventory's HTTP API. routes.go maps all of it; books.go holds the
// handlers, each decoding, validating and calling one use case of package stock.
package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// NewServer returns inventory's whole HTTP API.
func NewServer(svc *stock.Service, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := chi.NewRouter()
	r.Get("/books", listBooks(svc, tel))
	r.Get("/books/{id}", getBook(svc, tel))
	r.Put("/books/{id}", putBook(svc, tel))
	httpapi.Probes(r, tel.Metrics, ready...)
	return httpapi.Instrument(tel, r)
}
