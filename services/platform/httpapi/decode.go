package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"
)

// MaxBodyBytes is the largest request body any API accepts (64 KiB).
const MaxBodyBytes = 64 << 10

// Decode reads one JSON object into v, strictly: at most MaxBodyBytes of UTF-8; one
// object and nothing after it; every key spelled exactly as v names it, and only once;
// every value of the type v declares; no string that holds a NUL, which Postgres cannot
// store. encoding/json alone lets each of these through (it matches keys whatever their
// case, keeps the last of two, stops reading after the first value), and what it lets
// through either changes the meaning of a request silently or fails later as a 500. The
// error is a *Problem: 413 for a body too large, 400 naming the first offending field by
// its path (lines[0].quantity) where there is one. An empty body is the 400 unless v is
// BodyOptional.
func Decode(r *http.Request, v any) ([]byte, *Problem) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, malformed("", "could not read the body: "+err.Error())
	}
	if len(body) > MaxBodyBytes {
		return nil, NewProblem(http.StatusRequestEntityTooLarge, "too-large", "Request body too large",
			fmt.Sprintf("the body exceeds %d bytes", MaxBodyBytes))
	}
	if _, optional := v.(BodyOptional); optional && len(body) == 0 {
		return body, nil
	}
	if !utf8.Valid(body) {
		return nil, malformed("", "the body is not valid UTF-8")
	}
	if p := checkShape(body, reflect.TypeOf(v)); p != nil {
		return nil, p
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, decodeProblem(err)
	}
	return body, nil
}

// BodyOptional is a request body that may be left out: a request with no body at all
// (curl -X POST) decodes as the zero value, as if it were {}. A body that is there is
// decoded as any other.
type BodyOptional interface {
	BodyOptional()
}

// Validator is a request body that checks its own rules: it maps the path of each field
// that breaks one to what is wrong with it, and returns nothing when all hold.
type Validator interface {
	Valid() map[string]string
}

// DecodeValid decodes the body into v as Decode does and then checks v's rules, so a
// handler starts its transaction only with a request that is whole and valid. The problem
// is Decode's (400, 413) or the 422 of Invalid naming every field that breaks a rule.
func DecodeValid(r *http.Request, v Validator) *Problem {
	if _, p := Decode(r, v); p != nil {
		return p
	}
	if fields := v.Valid(); len(fields) > 0 {
		return Invalid(fields)
	}
	return nil
}

func decodeProblem(err error) *Problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return malformed("", "the body is empty; a JSON object is required")
	case errors.As(err, &syn):
		return malformed("", fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		return malformed(field, fmt.Sprintf("%s: expected %s, got JSON %s", field, typ.Type, typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return malformed(field, fmt.Sprintf("%s: unknown field", field))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("", "the body ends in the middle of a JSON value")
	default:
		return malformed("", err.Error())
	}
}

func malformed(field, detail string) *Problem {
	p := NewProblem(http.StatusBadRequest, "malformed", "Malformed request", detail)
	if field != "" {
		p.Errors = []FieldError{{Field: field, Detail: detail}}
	}
	return p
}
