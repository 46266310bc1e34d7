package httpapi

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

// IdempotencyKeyHeader carries the client's key for an operation it may retry: the same
// key on every retry, so the server can answer a repeat with the first answer instead of
// doing the work twice.
const IdempotencyKeyHeader = "Idempotency-Key"

// IdempotencyKey reads the Idempotency-Key header: one header of 1 to 255 printable ASCII
// characters. It returns "" and no problem when the request carries none (an API that
// requires a key answers Required); a 400 problem naming the header when the key is
// malformed.
func IdempotencyKey(r *http.Request) (string, *Problem) {
	values := r.Header.Values(IdempotencyKeyHeader)
	if len(values) == 0 {
		return "", nil
	}
	key := values[0]
	if len(values) > 1 || !ValidIdempotencyKey(key) {
		p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request",
			IdempotencyKeyHeader+": must be one header of 1 to 255 printable ASCII characters")
		p.Errors = []FieldError{{Field: IdempotencyKeyHeader, Detail: "must be 1 to 255 printable ASCII characters"}}
		return "", p
	}
	return key, nil
}

// ValidIdempotencyKey reports whether key is 1 to 255 printable ASCII characters, the
// only keys an API accepts, and so the only ones it can be asked about.
func ValidIdempotencyKey(key string) bool {
	if len(key) < 1 || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// IdempotencyKeyInFlight is the 409 problem for a request whose key's first request is
// still being worked on: the client cannot be told the outcome yet, and must not be told
// "not done", so it retries after the first completes. err says which key.
func IdempotencyKeyInFlight(err error) *Problem {
	return NewProblem(http.StatusConflict, "idempotency-key-in-flight", "Request in flight",
		err.Error()+"; retry after it completes")
}

// IdempotencyKeyReused is the 422 problem for a key sent again with a different body: a
// client bug (one key for two operations) that replaying the first answer would hide.
func IdempotencyKeyReused(err error) *Problem {
	p := NewProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused", err.Error())
	p.Errors = []FieldError{{Field: IdempotencyKeyHeader, Detail: "was used with a different body"}}
	return p
}

// Required is the 400 problem for a header or query parameter the request lacks; detail
// says what the client should send.
func Required(name, detail string) *Problem {
	p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request", name+": "+detail)
	p.Errors = []FieldError{{Field: name, Detail: "is required"}}
	return p
}

// RequiredQuery returns the query parameter name, or a 400 problem naming it when it is
// missing or empty.
func RequiredQuery(r *http.Request, name string) (string, *Problem) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return "", Required(name, "the query parameter is required")
	}
	return v, Text(name, v)
}

// Text returns a 400 problem naming the parameter name when v is not text a database
// can store: invalid UTF-8 (a %ff in a URL decodes to that) or a NUL (%00). Postgres
// refuses both, and the client would get a 500 for its own malformed request.
func Text(name, v string) *Problem {
	var detail string
	switch {
	case !utf8.ValidString(v):
		detail = "is not valid UTF-8"
	case strings.ContainsRune(v, 0):
		detail = "must not contain a NUL character"
	default:
		return nil
	}
	p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request", name+": "+detail)
	p.Errors = []FieldError{{Field: name, Detail: detail}}
	return p
}

// PathUUID reads the path parameter name of the chi route as a UUID, or returns a 400
// problem naming it.
func PathUUID(r *http.Request, name string) (uuid.UUID, *Problem) {
	return parseUUID(name, chi.URLParam(r, name))
}

// QueryUUID reads the required query parameter name as a UUID, or returns a 400 problem
// naming it when it is missing or not a UUID.
func QueryUUID(r *http.Request, name string) (uuid.UUID, *Problem) {
	raw, p := RequiredQuery(r, name)
	if p != nil {
		return uuid.Nil, p
	}
	return parseUUID(name, raw)
}

func parseUUID(name, raw string) (uuid.UUID, *Problem) {
	// Validate first: uuid.Parse takes any 38 bytes whose middle 36 are a UUID as the
	// {braced} form without looking at the braces, so "\xff<uuid>\x00" would pass.
	if err := uuid.Validate(raw); err != nil {
		return uuid.Nil, pathUUIDProblem(name, raw)
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, pathUUIDProblem(name, raw)
	}
	return id, nil
}
