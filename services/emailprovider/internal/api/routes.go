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
// The emails and the faults answer only callers with an API key, each route only a key
// with its scope (send, read, admin: APIKeys); the probes, metrics and
// this API's document are for anyone who reaches the port, as in every service.
func NewServer(svc *emails.Service, faults *emails.Faults, adminEnabled bool, keys APIKeys, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := httpapi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(keys.authenticate)
		// Each route asks for the scope it needs of the caller's key (ScopeSend, ...).
		r.With(require(ScopeSend)).Post("/v1/emails", sendEmail(svc, tel))
		r.With(require(ScopeRead)).Get("/v1/emails", listEmails(svc, tel))
		// The key may contain slashes (notification's are order/<id>/<kind>), so the rest
		// of the path is the key, escaped or not.
		r.With(require(ScopeRead)).Get("/v1/emails/*", getEmail(svc, tel))
		r.With(require(ScopeRead)).Get("/admin/faults", getFaults(faults))
		r.With(require(ScopeAdmin)).Put("/admin/faults", putFaults(faults, adminEnabled, tel))
	})
	httpapi.Document(r, apidocs.OpenAPI("emailprovider"))
	httpapi.Probes(r, tel, ready...)
	return httpapi.Instrument(tel, r)
}
