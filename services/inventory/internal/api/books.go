package api

import (
	"errors"
	"net/http"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// listBooks is GET /books: the catalogue with what is on hand, reserved and available.
func listBooks(svc *stock.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		books, err := svc.ListBooks(r.Context())
		if err != nil {
			tel.Logger.ErrorContext(r.Context(), "list books failed", "err", err)
			httpapi.Internal(w)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, books)
	}
}

// getBook is GET /books/{id}.
func getBook(svc *stock.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, problem := httpapi.PathUUID(r, "id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		book, err := svc.GetBook(r.Context(), id)
		switch {
		case errors.Is(err, stock.ErrNotFound):
			httpapi.NotFound(w, "book "+id.String())
		case err != nil:
			tel.Logger.ErrorContext(r.Context(), "get book failed", "err", err)
			httpapi.Internal(w)
		default:
			httpapi.WriteJSON(w, http.StatusOK, book)
		}
	}
}

// putBook is PUT /books/{id}: an absolute upsert of title and on_hand, so a client that
// retries after a lost response changes nothing the second time. 201 when the book is
// new, 200 when it was replaced, 422 when on_hand would fall below what is reserved.
func putBook(svc *stock.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, problem := httpapi.PathUUID(r, "id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		var req stock.PutBookRequest
		if problem := httpapi.DecodeValid(r, &req); problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		book, created, err := svc.PutBook(r.Context(), id, req)
		var below *stock.BelowReservedError
		switch {
		case errors.As(err, &below):
			httpapi.WriteProblem(w, httpapi.Invalid(map[string]string{"on_hand": below.Error()}))
		case err != nil:
			tel.Logger.ErrorContext(r.Context(), "put book failed", "err", err)
			httpapi.Internal(w)
		case created:
			w.Header().Set("Location", "/books/"+id.String())
			httpapi.WriteJSON(w, http.StatusCreated, book)
		default:
			httpapi.WriteJSON(w, http.StatusOK, book)
		}
	}
}
