package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// placeOrder is POST /orders: decode, validate, place in one transaction, answer 201, or
// replay the first answer for a repeated Idempotency-Key.
func placeOrder(svc Orders, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req orders.PlaceOrderRequest
		key, ok := readKeyed(w, r, &req)
		if !ok {
			return
		}
		placed, err := svc.PlaceOrder(r.Context(), key, req)
		if err != nil {
			keyedFailed(w, r, tel, "place order", err)
			return
		}
		w.Header().Set("Location", "/orders/"+placed.Order.ID.String())
		writeAnswer(w, placed, http.StatusCreated)
	}
}

// getOrder is GET /orders/{id}.
func getOrder(svc Orders, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, problem := httpapi.PathUUID(r, "id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		order, err := svc.GetOrder(r.Context(), id)
		switch {
		case errors.Is(err, orders.ErrNotFound):
			httpapi.NotFound(w, "order "+id.String())
		case err != nil:
			failed(w, r, tel, "get order", err)
		default:
			httpapi.WriteJSON(w, http.StatusOK, order)
		}
	}
}

// getOrderEvents is GET /orders/{id}/events: the order's events in ordering's outbox and
// where each stands (written, published), read-only. 404 for an unknown order.
func getOrderEvents(svc Orders, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, problem := httpapi.PathUUID(r, "id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		events, err := svc.OrderEvents(r.Context(), id)
		switch {
		case errors.Is(err, orders.ErrNotFound):
			httpapi.NotFound(w, "order "+id.String())
		case err != nil:
			failed(w, r, tel, "get order events", err)
		default:
			httpapi.WriteJSON(w, http.StatusOK, events)
		}
	}
}

// cancelOrder is POST /orders/{id}/cancel with the body {} or none (a JSON body, like
// every POST here, so a browser cannot send it across sites without asking first; one
// without a body that says it is from another origin is refused by httpapi); a pending or
// confirmed order becomes cancelled (200 with the order), a rejected or cancelled one
// answers 409 not-cancellable, and a repeated Idempotency-Key replays the first answer.
func cancelOrder(svc Orders, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, problem := httpapi.PathUUID(r, "id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		var req orders.CancelOrderRequest
		key, ok := readKeyed(w, r, &req)
		if !ok {
			return
		}
		cancelled, err := svc.CancelOrder(r.Context(), key, id)
		var notCancellable orders.NotCancellableError
		switch {
		case err == nil:
			writeAnswer(w, cancelled, http.StatusOK)
		case errors.Is(err, orders.ErrNotFound):
			httpapi.NotFound(w, "order "+id.String())
		case errors.As(err, &notCancellable):
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusConflict, "not-cancellable", "Order cannot be cancelled", notCancellable.Error()))
		default:
			keyedFailed(w, r, tel, "cancel order", err)
		}
	}
}

// readKeyed reads what a request that changes an order carries: its Idempotency-Key
// ("" when none) and its body, decoded into req and valid. On a problem it answers it and
// returns false.
func readKeyed(w http.ResponseWriter, r *http.Request, req httpapi.Validator) (key string, ok bool) {
	key, problem := httpapi.IdempotencyKey(r)
	if problem == nil {
		problem = httpapi.DecodeValid(r, req)
	}
	if problem != nil {
		httpapi.WriteProblem(w, problem)
		return "", false
	}
	return key, true
}

// writeAnswer writes the answer of a request that changes an order with status; a replay
// is a 200 marked Idempotent-Replayed with the first answer's body.
func writeAnswer(w http.ResponseWriter, a orders.Answer, status int) {
	w.Header().Set("Content-Type", "application/json")
	if a.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(a.Body)
}

// keyedFailed answers an error of a request with an Idempotency-Key: 409 while the key's
// first request is in flight, 422 when the key came with another body, otherwise as
// failed does.
func keyedFailed(w http.ResponseWriter, r *http.Request, tel *telemetry.Telemetry, what string, err error) {
	switch {
	case errors.Is(err, orders.ErrKeyInFlight):
		httpapi.WriteProblem(w, httpapi.IdempotencyKeyInFlight(err))
	case errors.Is(err, orders.ErrKeyMismatch):
		httpapi.WriteProblem(w, httpapi.IdempotencyKeyReused(err))
	default:
		failed(w, r, tel, what, err)
	}
}

// failed answers a use case's unexpected error. A failure of the database, not of the
// request, is 503 with Retry-After: refused before it did anything (no database
// connection within the bound: overloaded; none at all: unavailable), which promises
// that nothing was done; or a connection that broke under a statement, a database
// refusing any such work, or a statement cancelled at the database's statement timeout,
// where the detail says whether the order may exist. Either way
// the client may send the request again, with the same key, after Retry-After, and gets
// the order if it was placed. A client that hung up meanwhile gets 499, which nobody
// reads. Anything else is 500, which promises only that nothing was committed unless the
// answer said so.
func failed(w http.ResponseWriter, r *http.Request, tel *telemetry.Telemetry, what string, err error) {
	var unavailable *orders.UnavailableError
	var p *httpapi.Problem
	after := fmt.Sprintf("retry after %d s, with the same Idempotency-Key", orders.RetryAfter)
	switch {
	case errors.As(err, &unavailable) && unavailable.Reason == orders.ReasonPoolExhausted:
		p = httpapi.NewProblem(http.StatusServiceUnavailable, "overloaded", "Too busy to take the request",
			fmt.Sprintf("%s: no turn at the database within %v, as many requests as it has connections in progress (%d of %d in use); nothing was done; %s",
				unavailable.Reason, unavailable.Waited.Round(time.Millisecond), unavailable.InUse, unavailable.Max, after))
	case errors.As(err, &unavailable):
		p = httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			fmt.Sprintf("%s: the database could not be reached; nothing was done; %s", unavailable.Reason, after))
	case pgdb.LostConnection(err):
		tel.Logger.WarnContext(r.Context(), what+": the database connection broke under the request", "err", err)
		p = httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			fmt.Sprintf("%s: the connection to the database broke under the request; if that was during its commit, it may have been done; %s, which answers with what was done",
				orders.ReasonConnectionLost, after))
	case pgdb.Refused(err):
		tel.Logger.WarnContext(r.Context(), what+": the database refuses the work", "err", err)
		p = httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			fmt.Sprintf("%s: the database refuses this work for now; nothing was done; %s", orders.ReasonDatabaseRefused, after))
	case pgdb.TimedOut(err):
		tel.Logger.WarnContext(r.Context(), what+": a statement ran out of the database's statement timeout", "err", err)
		p = httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			fmt.Sprintf("%s: the database did not finish the request within its statement timeout; nothing was done; %s",
				orders.ReasonDatabaseTimeout, after))
	default:
		httpapi.Failed(w, r, tel.Logger, what, err)
		return
	}
	w.Header().Set("Retry-After", strconv.Itoa(orders.RetryAfter))
	httpapi.WriteProblem(w, p)
}
