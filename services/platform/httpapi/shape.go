package httpapi

import (
	"errors"
	"io"
	"reflect"

	"github.com/bookstore-go/bookstore/services/platform/strictjson"
)

// checkShape returns a 400 problem for the first thing in body that encoding/json would
// accept but should not (strictjson.Check), naming the field by its path.
func checkShape(body []byte, t reflect.Type) *Problem {
	err := strictjson.Check(body, t)
	var refused *strictjson.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused):
		return malformed(refused.Path, refused.Detail)
	case errors.Is(err, io.EOF):
		// Inside the object, the end of the body is a body cut short.
		return malformed("", "the body ends in the middle of a JSON value")
	}
	return decodeProblem(err)
}
