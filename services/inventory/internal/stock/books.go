package stock

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/inventory/internal/store"
)

// Book is a book as the API shows it.
type Book struct {
	ID        uuid.UUID `json:"id"`
	Title     string    `json:"title"`
	OnHand    int       `json:"on_hand"`
	Reserved  int       `json:"reserved"`
	Available int       `json:"available"` // on_hand - reserved
}

func bookOf(id uuid.UUID, title string, onHand, reserved int32) Book {
	return Book{ID: id, Title: title, OnHand: int(onHand), Reserved: int(reserved), Available: int(onHand - reserved)}
}

// ListBooks returns at most limit books of the catalogue in id order, those after the
// id after (from the first when it is nil).
func (s *Service) ListBooks(ctx context.Context, after *uuid.UUID, limit int) ([]Book, error) {
	params := store.ListBooksParams{MaxRows: int32(limit)}
	if after != nil {
		params.After = uuid.NullUUID{UUID: *after, Valid: true}
	}
	rows, err := store.New(s.pool).ListBooks(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("list books: %w", err)
	}
	out := make([]Book, len(rows))
	for i, r := range rows {
		out[i] = bookOf(r.ID, r.Title, r.OnHand, r.Reserved)
	}
	return out, nil
}

// GetBook returns one book, or ErrNotFound.
func (s *Service) GetBook(ctx context.Context, id uuid.UUID) (Book, error) {
	r, err := store.New(s.pool).GetBook(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Book{}, ErrNotFound
	}
	if err != nil {
		return Book{}, fmt.Errorf("get book: %w", err)
	}
	return bookOf(r.ID, r.Title, r.OnHand, r.Reserved), nil
}

// PutBookRequest is the body of PUT /books/{id}. Pointers tell a missing field from zero.
type PutBookRequest struct {
	Title  *string `json:"title"`
	OnHand *int    `json:"on_hand"`
}

// Limits of a book.
const (
	MaxTitleLen = 500
	MaxOnHand   = 1_000_000_000
)

// Valid returns a problem per invalid field, keyed by its JSON path; empty when valid.
func (r PutBookRequest) Valid() map[string]string {
	problems := map[string]string{}
	switch {
	case r.Title == nil || *r.Title == "":
		problems["title"] = "is required"
	case !utf8.ValidString(*r.Title) || utf8.RuneCountInString(*r.Title) > MaxTitleLen:
		problems["title"] = fmt.Sprintf("must be at most %d characters", MaxTitleLen)
	case contracts.TextProblem(*r.Title, utf8.UTFMax*MaxTitleLen) != "":
		// The text rule of an event's free text: no control or invisible formatting
		// character (a bidi override, ESC, BEL), which a page would show as it is.
		problems["title"] = contracts.TextProblem(*r.Title, utf8.UTFMax*MaxTitleLen)
	}
	switch {
	case r.OnHand == nil:
		problems["on_hand"] = "is required"
	case *r.OnHand < 0 || *r.OnHand > MaxOnHand:
		problems["on_hand"] = fmt.Sprintf("must be between 0 and %d", MaxOnHand)
	}
	return problems
}

// PutBook sets a book's title and on_hand to absolute values, creating the book if it is
// new (created is then true). It refuses, with *BelowReservedError, an on_hand below the
// copies already reserved: those orders were promised their books; and, with
// *CatalogueFullError, a new book when the catalogue already holds its maximum.
//
// The bound is checked in the transaction that inserts: every PUT first takes the
// catalogue's lock (LockCatalogue) and then counts, so PUTs that race for the last place
// take turns and the second sees the first's book. A replaced book never counts.
func (s *Service) PutBook(ctx context.Context, id uuid.UUID, req PutBookRequest) (book Book, created bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		if err := q.LockCatalogue(ctx); err != nil {
			return err
		}
		n, err := q.BooksIfNew(ctx, id)
		if err != nil {
			return err
		}
		if n >= int64(s.maxBooks) {
			return &CatalogueFullError{Max: s.maxBooks}
		}
		row, err := q.UpsertBook(ctx, store.UpsertBookParams{ID: id, Title: *req.Title})
		if err != nil {
			return err
		}
		level, err := q.SetOnHand(ctx, store.SetOnHandParams{ID: id, OnHand: int32(*req.OnHand)})
		if errors.Is(err, pgx.ErrNoRows) {
			// Too many copies reserved for the new on_hand: the transaction rolls back, the
			// title with it. Read the count for the message under the book's lock.
			current, err := q.GetBook(ctx, id)
			if err != nil {
				return err
			}
			return &BelowReservedError{OnHand: *req.OnHand, Reserved: int(current.Reserved)}
		}
		if err != nil {
			return err
		}
		book, created = bookOf(row.ID, row.Title, level.OnHand, level.Reserved), row.Created
		return nil
	})
	var below *BelowReservedError
	var full *CatalogueFullError
	if err != nil && !errors.As(err, &below) && !errors.As(err, &full) {
		err = fmt.Errorf("put book: %w", err)
	}
	if err != nil {
		return Book{}, false, err
	}
	return book, created, nil
}
