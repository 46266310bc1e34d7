// Package httpapi holds the HTTP conventions every Bookstore API shares: RFC 9457 problem
// details, strict JSON decoding, the Idempotency-Key header and UUID parameters, health
// and readiness endpoints, and request telemetry.
//
// It closes the "bad input silently accepted" failure: a body that is too large, has an
// unknown field or breaks a rule is refused with a problem that names the field, before
// any transaction starts, so nothing half-valid reaches the database or the broker.
package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// ProblemType prefixes every problem's type URI; the fragment names the problem.
const ProblemType = "https://github.com/bookstore-go/bookstore/blob/main/docs/problems.md#"

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Errors []FieldError `json:"errors,omitempty"` // one per invalid field
}

// FieldError names one invalid field, as a JSON path into the request body.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error lets a Problem travel as an error from a decoder to the handler.
func (p *Problem) Error() string { return p.Detail }

// NewProblem builds a problem; slug is its fragment of ProblemType.
func NewProblem(status int, slug, title, detail string) *Problem {
	return &Problem{Type: ProblemType + slug, Title: title, Status: status, Detail: detail}
}

// Invalid is the 422 problem for a well-formed request that breaks the rules; fields maps
// each field's path to what is wrong with it.
func Invalid(fields map[string]string) *Problem {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	p := NewProblem(http.StatusUnprocessableEntity, "validation", "Request is invalid", "")
	parts := make([]string, len(names))
	for i, f := range names {
		p.Errors = append(p.Errors, FieldError{Field: f, Detail: fields[f]})
		parts[i] = f + ": " + fields[f]
	}
	p.Detail = strings.Join(parts, "; ")
	return p
}

// WriteProblem writes p as application/problem+json.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// NotFound writes a 404 problem for the named resource.
func NotFound(w http.ResponseWriter, what string) {
	WriteProblem(w, NewProblem(http.StatusNotFound, "not-found", "Not found", what+" does not exist"))
}

// Internal writes a 500 problem without leaking the error to the client.
func Internal(w http.ResponseWriter) {
	WriteProblem(w, NewProblem(http.StatusInternalServerError, "internal", "Internal error",
		"the request failed; nothing was changed unless the response said so"))
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// pathUUIDProblem is the 400 problem for a path parameter that is not a UUID.
func pathUUIDProblem(name, value string) *Problem {
	p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request", fmt.Sprintf("%s: %q is not a UUID", name, value))
	p.Errors = []FieldError{{Field: name, Detail: "not a UUID"}}
	return p
}
