// Package api is the email provider's HTTP API. routes.go maps all of it; emails.go holds
// the email handlers and faults.go the fault-injection admin endpoints.
package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/services/emailprovider/internal/emails"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// NewServer returns the provider's whole HTTP API. adminEnabled allows PUT /admin/faults.
// The emails and the faults answer only callers with an API key; the probes, metrics and
// this API's document are for anyone who reaches the port, as in every service.
func NewServer(svc *emails.Service, faults *emails.Faults, adminEnabled bool, keys APIKeys, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := httpapi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(keys.authenticate)
		r.Post("/v1/emails", sendEmail(svc, tel))
		r.Get("/v1/emails", listEmails(svc, tel))
		// The key may contain slashes (notification's are order/<id>/<kind>), so the rest
		// of the path is the key, escaped or not.
		r.Get("/v1/emails/*", getEmail(svc, tel))
		r.Get("/admin/faults", getFaults(faults))
		r.Put("/admin/faults", putFaults(faults, adminEnabled, tel))
	})
	httpapi.Document(r, apidocs.OpenAPI("emailprovider"))
	httpapi.Probes(r, tel, ready...)
	return httpapi.Instrument(tel, r)
}
