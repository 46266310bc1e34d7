package api

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/emails"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// sendEmail is POST /v1/emails: 202 for the first request of a key and, with the same
// body, for every replay of it (header Idempotent-Replayed: true); 422 for the key reused
// with another body; 409 while the key's first request is still being sent.
func sendEmail(svc *emails.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The key is required: without one, a retry after a lost answer would send the
		// email again.
		key, problem := httpapi.IdempotencyKey(r)
		if problem == nil && key == "" {
			problem = httpapi.Required(httpapi.IdempotencyKeyHeader, "the header is required; send one key per email and reuse it on every retry")
		}
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		var req emails.Request
		if problem := httpapi.DecodeValid(r, &req); problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}

		sent, err := svc.Send(r.Context(), accountOf(r), key, req)
		switch {
		case errors.Is(err, emails.ErrKeyInFlight):
			httpapi.WriteProblem(w, httpapi.IdempotencyKeyInFlight(err))
			return
		case errors.Is(err, emails.ErrKeyMismatch):
			httpapi.WriteProblem(w, httpapi.IdempotencyKeyReused(err))
			return
		case errors.Is(err, emails.ErrUnavailable):
			w.Header().Set("Retry-After", "1")
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "Service unavailable", err.Error()))
			return
		case errors.Is(err, emails.ErrRecipientRefused):
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusUnprocessableEntity, "recipient-refused", "Recipient refused", err.Error()))
			return
		case err != nil:
			httpapi.Failed(w, r, tel.Logger, "send email", err)
			return
		}

		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/emails/"+url.PathEscape(key))
		if sent.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(sent.Body)
	}
}

// getEmail is GET /v1/emails/{idempotency_key}: the reconciliation query. 200 with the
// email, 404 when nothing was ever sent with the key.
func getEmail(svc *emails.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := chi.URLParam(r, "*")
		if r.URL.RawPath != "" { // the client escaped something, such as the key's slashes
			unescaped, err := url.PathUnescape(key)
			if err != nil {
				httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusBadRequest, "malformed", "Malformed request", "idempotency_key: bad escape"))
				return
			}
			key = unescaped
		}
		if key == "" {
			httpapi.NotFound(w, "an email with an empty key")
			return
		}
		if !httpapi.ValidIdempotencyKey(key) {
			p := httpapi.NewProblem(http.StatusBadRequest, "malformed", "Malformed request",
				"idempotency_key: must be 1 to 255 printable ASCII characters, as Idempotency-Key is")
			p.Errors = []httpapi.FieldError{{Field: "idempotency_key", Detail: "must be 1 to 255 printable ASCII characters"}}
			httpapi.WriteProblem(w, p)
			return
		}
		email, err := svc.Get(r.Context(), accountOf(r), key)
		switch {
		case errors.Is(err, emails.ErrNotFound):
			httpapi.NotFound(w, "an email with Idempotency-Key "+key)
		case err != nil:
			httpapi.Failed(w, r, tel.Logger, "get email", err)
		default:
			httpapi.WriteJSON(w, http.StatusOK, email)
		}
	}
}

// listEmails is GET /v1/emails?to={address}: the emails sent to the address, each with
// its deliveries, oldest first, a page at a time (limit, after and the next link of
// httpapi.ParsePage).
func listEmails(svc *emails.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		to, problem := httpapi.RequiredQuery(r, "to")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		page, problem := httpapi.ParsePage[emails.Cursor](r)
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		list, err := svc.ListByRecipient(r.Context(), accountOf(r), to, page.After, page.Fetch())
		if err != nil {
			httpapi.Failed(w, r, tel.Logger, "list emails", err)
			return
		}
		list = httpapi.NextPage(w, r, page, list, emails.CursorOf)
		httpapi.WriteJSON(w, http.StatusOK, list)
	}
}
