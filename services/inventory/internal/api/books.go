package api

import (
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// listBooks is GET /books: the catalogue with what is on hand, reserved and available, a
// page at a time in id order (limit, after and the next link of httpapi.ParsePage).
func listBooks(svc *stock.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page, problem := httpapi.ParsePage[uuid.UUID](r)
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		books, err := svc.ListBooks(r.Context(), page.After, page.Fetch())
		if err != nil {
			httpapi.Failed(w, r, tel.Logger, "list books", err)
			return
		}
		books = httpapi.NextPage(w, r, page, books, func(b stock.Book) uuid.UUID { return b.ID })
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
			httpapi.Failed(w, r, tel.Logger, "get book", err)
		default:
			httpapi.WriteJSON(w, http.StatusOK, book)
		}
	}
}

// putBook is PUT /books/{id}: an absolute upsert of title and on_hand, so a client that
// retries after a lost response changes nothing the second time. 201 when the book is
// new, 200 when it was replaced, 422 when on_hand would fall below what is reserved, 409
// when a new book would pass the catalogue's maximum. An administrative operation: 403
// unless inventory was started with INVENTORY_ADMIN=1, so whoever reaches the port cannot
// grow the catalogue or reset the stock.
func putBook(svc *stock.Service, enabled bool, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !enabled {
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusForbidden, "admin-disabled", "Admin API disabled",
				"start inventory with INVENTORY_ADMIN=1 to change the catalogue"))
			return
		}
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
		var full *stock.CatalogueFullError
		switch {
		case errors.As(err, &below):
			httpapi.WriteProblem(w, httpapi.Invalid(map[string]string{"on_hand": below.Error()}))
		case errors.As(err, &full):
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusConflict, "catalogue-full", "Catalogue full", full.Error()))
		case err != nil:
			httpapi.Failed(w, r, tel.Logger, "put book", err)
		case created:
			w.Header().Set("Location", "/books/"+id.String())
			httpapi.WriteJSON(w, http.StatusCreated, book)
		default:
			httpapi.WriteJSON(w, http.StatusOK, book)
		}
	}
}

// getReservation is GET /orders/{id}/reservation: inventory's answer to one order, read-
// only. 404 until inventory has answered it (or for an order it never heard of).
func getReservation(svc *stock.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, problem := httpapi.PathUUID(r, "id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		res, err := svc.Reservation(r.Context(), id)
		switch {
		case errors.Is(err, stock.ErrNoAnswer):
			httpapi.NotFound(w, "an answer to order "+id.String())
		case err != nil:
			httpapi.Failed(w, r, tel.Logger, "get reservation", err)
		default:
			httpapi.WriteJSON(w, http.StatusOK, res)
		}
	}
}
