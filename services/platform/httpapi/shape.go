package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// checkShape walks the JSON body token by token beside the Go type it will be decoded
// into, and returns a 400 problem for the first thing encoding/json would accept but
// should not: a key that is not the field's exact name, a key given twice, a value of
// the wrong type, a string holding a NUL or a value its type refuses (a malformed
// UUID), anything after the object. Each names the field by its path.
func checkShape(body []byte, t reflect.Type) *Problem {
	w := walker{dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber()
	tok, err := w.dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return malformed("", "the body is empty; a JSON object is required")
	case err != nil:
		return decodeProblem(err)
	case tok != json.Delim('{'):
		return malformed("", "the body must be a JSON object, not "+kindOf(tok))
	}
	if p := w.object(elem(t), ""); p != nil {
		return p
	}
	if _, err := w.dec.Token(); !errors.Is(err, io.EOF) {
		return malformed("", "the body holds something after its JSON object")
	}
	return nil
}

type walker struct{ dec *json.Decoder }

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

// value checks the value that starts with tok against t.
func (w walker) value(tok json.Token, t reflect.Type, path string) *Problem {
	t = elem(t)
	if tok == nil {
		return nil // null leaves the field as it is; Valid says whether it may be missing
	}
	if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		// Any value, or one the type reads itself (json.RawMessage, a duration written
		// "200ms"): json.Unmarshal asks the type, and its error names no field.
		return w.skip(tok, path)
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		s, ok := tok.(string)
		if !ok {
			return wrongType(path, "a string", tok)
		}
		if p := noNUL(s, path); p != nil {
			return p
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return malformed(path, path+": "+err.Error())
		}
		return nil
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch {
		case tok == '{' && t.Kind() == reflect.Struct:
			return w.object(t, path)
		case tok == '{' && t.Kind() == reflect.Map:
			return w.mapObject(t.Elem(), path)
		case tok == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			return w.array(t.Elem(), path)
		}
	case string:
		if t.Kind() == reflect.String {
			return noNUL(tok, path)
		}
	case bool:
		if t.Kind() == reflect.Bool {
			return nil
		}
	case json.Number:
		return number(tok, t, path)
	}
	return wrongType(path, want(t), tok)
}

// object checks the members of an object decoded into struct type t.
func (w walker) object(t reflect.Type, path string) *Problem {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for w.dec.More() {
		key, p := w.key(path, seen)
		if p != nil {
			return p
		}
		at := join(path, key)
		ft, ok := fields[key]
		if !ok {
			return malformed(at, at+": unknown field (names are case-sensitive)")
		}
		if p := w.next(ft, at); p != nil {
			return p
		}
	}
	_, err := w.dec.Token() // the closing brace
	return syntax(err)
}

// mapObject checks an object decoded into a map of elem.
func (w walker) mapObject(elem reflect.Type, path string) *Problem {
	seen := map[string]bool{}
	for w.dec.More() {
		key, p := w.key(path, seen)
		if p != nil {
			return p
		}
		if p := w.next(elem, join(path, key)); p != nil {
			return p
		}
	}
	_, err := w.dec.Token()
	return syntax(err)
}

func (w walker) array(elem reflect.Type, path string) *Problem {
	for i := 0; w.dec.More(); i++ {
		if p := w.next(elem, fmt.Sprintf("%s[%d]", path, i)); p != nil {
			return p
		}
	}
	_, err := w.dec.Token()
	return syntax(err)
}

// key reads an object's next key, refusing one already seen.
func (w walker) key(path string, seen map[string]bool) (string, *Problem) {
	tok, err := w.dec.Token()
	if err != nil {
		return "", syntax(err)
	}
	key := tok.(string) // the decoder's own syntax check guarantees a string here
	at := join(path, key)
	if p := noNUL(key, at); p != nil {
		return "", p
	}
	if seen[key] {
		return "", malformed(at, at+": appears more than once")
	}
	seen[key] = true
	return key, nil
}

// next reads the next value and checks it against t.
func (w walker) next(t reflect.Type, path string) *Problem {
	tok, err := w.dec.Token()
	if err != nil {
		return syntax(err)
	}
	return w.value(tok, t, path)
}

// skip reads a value of any type, still refusing NULs and repeated keys.
func (w walker) skip(tok json.Token, path string) *Problem {
	anything := reflect.TypeFor[any]()
	switch tok {
	case json.Delim('{'):
		return w.mapObject(anything, path)
	case json.Delim('['):
		return w.array(anything, path)
	}
	if s, ok := tok.(string); ok {
		return noNUL(s, path)
	}
	return nil
}

func number(n json.Number, t reflect.Type, path string) *Problem {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			return malformed(path, fmt.Sprintf("%s: expected an integer in range, got %s", path, n))
		}
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowUint(u) {
			return malformed(path, fmt.Sprintf("%s: expected a non-negative integer in range, got %s", path, n))
		}
		return nil
	case reflect.Float32, reflect.Float64:
		return nil
	}
	return wrongType(path, want(t), n)
}

// jsonFields maps the JSON names of struct t's fields, as encoding/json names them, to
// their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || (f.Anonymous && f.Tag.Get("json") == "") {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func noNUL(s, path string) *Problem {
	if strings.ContainsRune(s, 0) {
		field := path
		if field == "" {
			field = "(body)"
		}
		return malformed(path, field+": must not contain a NUL character (\\u0000)")
	}
	return nil
}

func wrongType(path, want string, got json.Token) *Problem {
	return malformed(path, fmt.Sprintf("%s: expected %s, got %s", path, want, kindOf(got)))
}

// want names what JSON value a Go type takes.
func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a " + t.Kind().String()
}

// kindOf names the JSON value a token starts.
func kindOf(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// syntax is the problem of a token that could not be read: inside the object, the end
// of the body is a body cut short.
func syntax(err error) *Problem {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return malformed("", "the body ends in the middle of a JSON value")
	}
	return decodeProblem(err)
}
