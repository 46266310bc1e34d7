// Package httpapi holds the HTTP conventions every Bookstore API shares: RFC 9457 problem
// details, strict JSON decoding, the Idempotency-Key header and UUID parameters, health
// and readiness endpoints, and request telemetry.
//
// It closes the "bad input silently accepted" failure: a body that is too large, has an
// unknown field or breaks a rule is refused with a problem that names the field, before
// any transaction starts, so nothing half-valid reaches the database or the broker.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"
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

// Bounds of a problem, whatever the request it answers: a 63 KB body of 21,000 empty
// order lines once bought a 4.4 MB answer listing each line's errors, and a 60 KB path
// came back whole in a 404's detail. A client fixes one error at a time anyway.
const (
	// MaxProblemErrors is the most field errors a problem lists; its detail says how
	// many more there were.
	MaxProblemErrors = 20
	// MaxDetailBytes bounds a problem's detail.
	MaxDetailBytes = 1 << 10
	// ExcerptBytes bounds each value a client sent that a problem or a log line repeats.
	ExcerptBytes = 200
)

// Excerpt is a value a client sent as a log line or a problem may repeat it: whole when
// it is at most ExcerptBytes long, otherwise its first ExcerptBytes (cut between
// characters) and how long the whole was. Every client value that is logged goes
// through it, so no request writes more than a bounded line.
func Excerpt(s string) string { return cut(s, ExcerptBytes) }

// cut is s, or its first max bytes cut between characters and marked with s's length.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
}

// Invalid is the 422 problem for a well-formed request that breaks the rules; fields maps
// each field's path to what is wrong with it. It lists the first MaxProblemErrors fields
// by path and counts the rest.
func Invalid(fields map[string]string) *Problem {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	p := NewProblem(http.StatusUnprocessableEntity, "validation", "Request is invalid", "")
	listed := names[:min(len(names), MaxProblemErrors)]
	parts := make([]string, len(listed))
	for i, f := range listed {
		p.Errors = append(p.Errors, FieldError{Field: Excerpt(f), Detail: Excerpt(fields[f])})
		parts[i] = p.Errors[i].Field + ": " + p.Errors[i].Detail
	}
	// Room is left for the count, so WriteProblem's bound never cuts it off.
	p.Detail = cut(strings.Join(parts, "; "), MaxDetailBytes-64)
	if more := len(names) - len(listed); more > 0 {
		p.Detail += fmt.Sprintf("; and %d more fields", more)
	}
	return p
}

// WriteProblem writes p as application/problem+json, bounded: at most MaxProblemErrors
// field errors, each field and detail an Excerpt, the detail at most MaxDetailBytes.
// Every problem of every API is written here, so no producer of one can forget a bound.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	out := *p
	out.Errors = nil
	for _, e := range p.Errors[:min(len(p.Errors), MaxProblemErrors)] {
		out.Errors = append(out.Errors, FieldError{Field: Excerpt(e.Field), Detail: Excerpt(e.Detail)})
	}
	out.Detail = cut(p.Detail, MaxDetailBytes)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(out.Status)
	_ = json.NewEncoder(w).Encode(out)
}

// NotFound writes a 404 problem for the named resource.
func NotFound(w http.ResponseWriter, what string) {
	WriteProblem(w, NewProblem(http.StatusNotFound, "not-found", "Not found", what+" does not exist"))
}

// internal writes a 500 problem without leaking the error to the client.
func internal(w http.ResponseWriter) {
	WriteProblem(w, NewProblem(http.StatusInternalServerError, "internal", "Internal error",
		"the request failed; nothing was changed unless the response said so"))
}

// StatusClientClosedRequest is the status of the answer to a request whose client hung
// up before it (nginx's 499). Nobody reads that answer; the access log and the metrics
// do, and an abandoned request is no failure of the service's.
const StatusClientClosedRequest = 499

// ClientGone reports whether r's client hung up before its answer: the server cancels a
// request's context when its connection closes, and whatever failed under it failed of
// that (a client that timed out, one that gave up on a process frozen while its request
// waited in the socket).
func ClientGone(r *http.Request) bool { return errors.Is(r.Context().Err(), context.Canceled) }

// ClientClosed writes the 499 problem for a request whose client hung up (ClientGone).
func ClientClosed(w http.ResponseWriter) {
	WriteProblem(w, NewProblem(StatusClientClosedRequest, "client-closed-request", "Client closed request",
		"the client hung up before the answer; a retry with the same Idempotency-Key answers with what was done"))
}

// Failed answers a request whose work failed of err, an error with no answer of its own:
// 499 when the client hung up (ClientGone; what failed then failed of the cancelled
// context), logged at info; otherwise 500, logged at error as "<what> failed", the error
// kept from the client.
func Failed(w http.ResponseWriter, r *http.Request, log *slog.Logger, what string, err error) {
	if ClientGone(r) {
		log.InfoContext(r.Context(), what+": the client hung up before the answer", "err", err)
		ClientClosed(w)
		return
	}
	log.ErrorContext(r.Context(), what+" failed", "err", err)
	internal(w)
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// pathUUIDProblem is the 400 problem for a path parameter that is not a UUID.
func pathUUIDProblem(name, value string) *Problem {
	p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request", fmt.Sprintf("%s: %q is not a UUID", name, Excerpt(value)))
	p.Errors = []FieldError{{Field: name, Detail: "not a UUID"}}
	return p
}
