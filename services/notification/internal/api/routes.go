// Package api is notification's HTTP API: the records of an order's emails, and the
// health, readiness and metrics endpoints.
package api

import (
	"net/http"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// NewServer returns notification's whole HTTP API.
func NewServer(svc *notifications.Service, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	r := httpapi.NewRouter()
	r.Get("/notifications", listNotifications(svc, tel))
	httpapi.Document(r, apidocs.OpenAPI("notification"))
	httpapi.Probes(r, tel, ready...)
	return httpapi.Instrument(tel, r)
}
