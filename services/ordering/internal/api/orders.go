package api

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/ordering/internal/orders"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// placeOrder is POST /orders: decode, validate, place in one transaction, answer 201, or
// replay the first answer for a repeated Idempotency-Key.
func placeOrder(svc *orders.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, problem := idempotencyKey(r)
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		var req orders.PlaceOrderRequest
		if _, problem := httpapi.Decode(r, &req); problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		if fields := req.Valid(); len(fields) > 0 {
			httpapi.WriteProblem(w, httpapi.Invalid(fields))
			return
		}

		placed, err := svc.PlaceOrder(r.Context(), key, req)
		switch {
		case errors.Is(err, orders.ErrKeyInFlight):
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusConflict, "idempotency-key-in-flight",
				"Request in flight", err.Error()+"; retry after it completes"))
			return
		case errors.Is(err, orders.ErrKeyMismatch):
			p := httpapi.NewProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused", err.Error())
			p.Errors = []httpapi.FieldError{{Field: "Idempotency-Key", Detail: "was used with a different body"}}
			httpapi.WriteProblem(w, p)
			return
		case err != nil:
			tel.Logger.ErrorContext(r.Context(), "place order failed", "err", err)
			httpapi.Internal(w)
			return
		}

		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+placed.Order.ID.String())
		status := http.StatusCreated
		if placed.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, _ = w.Write(placed.Body)
	}
}

// idempotencyKey reads the optional Idempotency-Key header: 1 to 255 printable ASCII
// characters.
func idempotencyKey(r *http.Request) (string, *httpapi.Problem) {
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		return "", nil
	}
	key := values[0]
	bad := len(values) > 1 || len(key) < 1 || len(key) > 255
	for i := 0; i < len(key) && !bad; i++ {
		bad = key[i] < 0x20 || key[i] > 0x7e
	}
	if bad {
		p := httpapi.NewProblem(http.StatusBadRequest, "malformed", "Malformed request",
			"Idempotency-Key: must be one header of 1 to 255 printable ASCII characters")
		p.Errors = []httpapi.FieldError{{Field: "Idempotency-Key", Detail: "must be 1 to 255 printable ASCII characters"}}
		return "", p
	}
	return key, nil
}

// getOrder is GET /orders/{id}.
func getOrder(svc *orders.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := chi.URLParam(r, "id")
		id, err := uuid.Parse(raw)
		if err != nil {
			httpapi.WriteProblem(w, httpapi.PathUUIDProblem("id", raw))
			return
		}
		order, err := svc.GetOrder(r.Context(), id)
		switch {
		case errors.Is(err, orders.ErrNotFound):
			httpapi.NotFound(w, "order "+id.String())
		case err != nil:
			tel.Logger.ErrorContext(r.Context(), "get order failed", "err", err)
			httpapi.Internal(w)
		default:
			httpapi.WriteJSON(w, http.StatusOK, order)
		}
	}
}
