// Package strictjson checks JSON against the Go type it will be decoded into, for what
// encoding/json accepts but should not: a key that is not a field's exact name (it
// matches keys whatever their case), a key given twice (it keeps the last), and, in the
// full check, a value of the wrong type, a string holding a NUL (which Postgres cannot
// store) and anything after the object. The HTTP decoder (httpapi.Decode) and the event
// decoder (event.Envelope.DecodeData) both walk their input with it.
package strictjson

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
	"sync"
)

// Error is what the check refuses, at Path (lines[0].quantity; "" for the whole body).
// Detail names the path itself. A token the decoder cannot read is returned as the
// decoder's own error, not an *Error.
type Error struct {
	Path, Detail string
}

func (e *Error) Error() string { return e.Detail }

// Check checks that body is one JSON object, and nothing after it, whose every key,
// value and string t accepts exactly.
func Check(body []byte, t reflect.Type) error {
	w := walker{dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber()
	tok, err := w.dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return refuse("", "the body is empty; a JSON object is required")
	case err != nil:
		return err
	case tok != json.Delim('{'):
		return refuse("", "the body must be a JSON object, not "+kindOf(tok))
	}
	if err := w.object(elem(t), ""); err != nil {
		return err
	}
	if _, err := w.dec.Token(); !errors.Is(err, io.EOF) {
		return refuse("", "the body holds something after its JSON object")
	}
	return nil
}

// CheckKeys checks only the keys of the JSON value in data, which encoding/json has
// already decoded into t: each must be a field's exact name and appear once in its object.
func CheckKeys(data []byte, t reflect.Type) error {
	w := walker{dec: json.NewDecoder(bytes.NewReader(data)), keysOnly: true}
	w.dec.UseNumber()
	return w.next(t, "")
}

// walker reads a JSON value token by token beside the Go type it is decoded into.
type walker struct {
	dec      *json.Decoder
	keysOnly bool // the values are known to fit their types: check the keys alone
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

// value checks the value that starts with tok against t.
func (w walker) value(tok json.Token, t reflect.Type, path string) error {
	t = elem(t)
	if tok == nil {
		return nil // null leaves the field as it is; the caller's rules say whether it may be missing
	}
	text := reflect.PointerTo(t).Implements(textUnmarshaler)
	if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(jsonUnmarshaler) || (text && w.keysOnly) {
		// Any value, or one the type reads itself (json.RawMessage, a duration written
		// "200ms"): json.Unmarshal asks the type, and its error names no field.
		return w.skip(tok, path)
	}
	if text {
		s, ok := tok.(string)
		if !ok {
			return wrongType(path, "a string", tok)
		}
		if err := w.noNUL(s, path); err != nil {
			return err
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return refuse(path, path+": "+err.Error())
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
		case w.keysOnly:
			return w.skip(tok, path)
		}
	case string:
		if w.keysOnly || t.Kind() == reflect.String {
			return w.noNUL(tok, path)
		}
	case bool:
		if w.keysOnly || t.Kind() == reflect.Bool {
			return nil
		}
	case json.Number:
		if w.keysOnly {
			return nil
		}
		return number(tok, t, path)
	}
	return wrongType(path, want(t), tok)
}

// object checks the members of an object decoded into struct type t.
func (w walker) object(t reflect.Type, path string) error {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for w.dec.More() {
		key, err := w.key(path, seen)
		if err != nil {
			return err
		}
		at := join(path, key)
		ft, ok := fields[key]
		if !ok {
			return refuse(at, at+": unknown field (names are case-sensitive)")
		}
		if err := w.next(ft, at); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // the closing brace
	return err
}

// mapObject checks an object decoded into a map of elem.
func (w walker) mapObject(elem reflect.Type, path string) error {
	seen := map[string]bool{}
	for w.dec.More() {
		key, err := w.key(path, seen)
		if err != nil {
			return err
		}
		if err := w.next(elem, join(path, key)); err != nil {
			return err
		}
	}
	_, err := w.dec.Token()
	return err
}

func (w walker) array(elem reflect.Type, path string) error {
	for i := 0; w.dec.More(); i++ {
		if err := w.next(elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err := w.dec.Token()
	return err
}

// key reads an object's next key, refusing one already seen.
func (w walker) key(path string, seen map[string]bool) (string, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return "", err
	}
	key := tok.(string) // the decoder's own syntax check guarantees a string here
	at := join(path, key)
	if err := w.noNUL(key, at); err != nil {
		return "", err
	}
	if seen[key] {
		return "", refuse(at, at+": appears more than once")
	}
	seen[key] = true
	return key, nil
}

// next reads the next value and checks it against t.
func (w walker) next(t reflect.Type, path string) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	return w.value(tok, t, path)
}

// skip reads a value of any type, still refusing NULs and repeated keys.
func (w walker) skip(tok json.Token, path string) error {
	anything := reflect.TypeFor[any]()
	switch tok {
	case json.Delim('{'):
		return w.mapObject(anything, path)
	case json.Delim('['):
		return w.array(anything, path)
	}
	if s, ok := tok.(string); ok {
		return w.noNUL(s, path)
	}
	return nil
}

func number(n json.Number, t reflect.Type, path string) error {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			return refuse(path, fmt.Sprintf("%s: expected an integer in range, got %s", path, n))
		}
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowUint(u) {
			return refuse(path, fmt.Sprintf("%s: expected a non-negative integer in range, got %s", path, n))
		}
		return nil
	case reflect.Float32, reflect.Float64:
		return nil
	}
	return wrongType(path, want(t), n)
}

// jsonFields maps the JSON names of struct t's fields, as encoding/json names them, to
// their types. The map is made once per type and shared: read it, never change it.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if fields, ok := fieldTables.Load(t); ok {
		return fields.(map[string]reflect.Type)
	}
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
	fieldTables.Store(t, fields)
	return fields
}

// fieldTables holds jsonFields' map of each struct type met so far: a type's fields
// never change, and without it every object of every request listed them again.
var fieldTables sync.Map // reflect.Type -> map[string]reflect.Type

// noNUL refuses a NUL in s, except in a keys-only check, which leaves strings alone.
func (w walker) noNUL(s, path string) error {
	if w.keysOnly || !strings.ContainsRune(s, 0) {
		return nil
	}
	field := path
	if field == "" {
		field = "(body)"
	}
	return refuse(path, field+": must not contain a NUL character (\\u0000)")
}

func refuse(path, detail string) *Error { return &Error{Path: path, Detail: detail} }

func wrongType(path, want string, got json.Token) error {
	return refuse(path, fmt.Sprintf("%s: expected %s, got %s", path, want, kindOf(got)))
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
