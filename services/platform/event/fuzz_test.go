package event

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
)

// FuzzDecodeAcceptsOnlyEnvelopesThatKeepTheContract: whatever a queue holds, Decode either
// refuses it as poison with a reason, or hands over an envelope that keeps every rule of
// docs/contracts.md, checked here again without Decode's help: specversion 1.0, an id in
// canonical UUID form, a source, a known type, a subject, a positive decimal sequence,
// data that is one JSON value other than null, nothing after the event, and no string a
// database could not store.
func FuzzDecodeAcceptsOnlyEnvelopesThatKeepTheContract(f *testing.F) {
	valid := string(validBody(f))
	for _, seed := range []string{
		valid,
		valid + " ",
		valid + "]",   // trailing ]: JSON followed by more
		valid + "}",   // trailing }
		valid + valid, // two events
		strings.Replace(valid, `"id"`, `"ID"`, 1),                                   // a key in another case
		strings.Replace(valid, `{"specversion"`, `{"subject":"x","specversion"`, 1), // subject twice
		strings.Replace(valid, `"subject":"`, `"subject":"\u0000`, 1),
		strings.Replace(valid, `"source":"`, `"source":"\u0000`, 1),
		strings.Replace(valid, `"source":"`, "\"source\":\"\xff", 1),
		strings.Replace(valid, `"sequence":"1"`, `"sequence":"99999999999999999999999"`, 1),
		strings.Replace(valid, `"sequence":"1"`, `"sequence":"+1"`, 1),
		strings.Replace(valid, `"sequence":"1"`, `"sequence":1`, 1),
		strings.Replace(valid, `"data":{`, `"data":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]],"x":{`, 1),
		`{"specversion":"1.0","id":"018f2b1e-0000-7000-8000-0000000000aa","source":"s","type":"shop.order-placed.v1","subject":"x","sequence":"1","data":null}`,
		`{"specversion":"1.0","id":"018f2b1e-0000-7000-8000-0000000000aa","source":"s","type":"shop.order-placed.v1","subject":"x","sequence":"1","data":1e999}`,
		"", "null", "[]", "{}", `"x"`, "\xff", strings.Repeat("[", 10000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := Decode(body, placed, shipped)
		if err != nil {
			if reason, ok := IsPoison(err); !ok || reason == "" {
				t.Fatalf("%q: error not classified as poison: %v", body, err)
			}
			return
		}
		id, perr := uuid.Parse(env.ID)
		seq, serr := strconv.ParseInt(env.Sequence, 10, 64)
		switch {
		case env.SpecVersion != "1.0":
			t.Fatalf("%q: accepted specversion %q", body, env.SpecVersion)
		case perr != nil || id.String() != env.ID:
			t.Fatalf("%q: accepted id %q", body, env.ID)
		case env.Type != placed && env.Type != shipped:
			t.Fatalf("%q: accepted type %q", body, env.Type)
		case env.Source == "" || env.Subject == "":
			t.Fatalf("%q: accepted an empty source or subject", body)
		case serr != nil || seq < 1 || strconv.FormatInt(seq, 10) != env.Sequence:
			t.Fatalf("%q: accepted sequence %q", body, env.Sequence)
		case !json.Valid(env.Data) || bytes.Equal(bytes.TrimSpace(env.Data), []byte("null")):
			t.Fatalf("%q: accepted data %q", body, env.Data)
		}
		for _, s := range []string{env.SpecVersion, env.ID, env.Source, env.Type, env.Subject, env.DataContentType, env.Sequence, env.TraceParent, env.TraceState} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("%q: accepted the string %q, which Postgres cannot store", body, s)
			}
		}
		// Nothing follows the event but white space.
		var rest json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&rest); err != nil {
			t.Fatalf("%q: accepted, but it is not one JSON value: %v", body, err)
		}
		if tail := bytes.TrimSpace(body[dec.InputOffset():]); len(tail) > 0 {
			t.Fatalf("%q: accepted with %q after the event", body, tail)
		}
		// Deterministic: the same bytes decode to the same content.
		again, err := Decode(body, placed, shipped)
		if err != nil || !bytes.Equal(again.ContentHash(), env.ContentHash()) {
			t.Fatalf("%q: a second Decode disagrees: %v", body, err)
		}
	})
}

// keyPaths walks one JSON value generically, without the Go type, and returns the path
// of every object key in it (array indices written as []), and whether some object
// holds a key twice.
func keyPaths(data []byte) (paths map[string]bool, twice bool, err error) {
	paths = map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				twice = twice || seen[key]
				seen[key] = true
				paths[path+"."+key] = true
				if err := walk(path + "." + key); err != nil {
					return err
				}
			}
			_, err = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if err := walk(path + "[]"); err != nil {
					return err
				}
			}
			_, err = dec.Token()
		}
		return err
	}
	return paths, twice, walk("")
}

// FuzzDecodeDataReadsOnlyTheFieldsItKnowsExactlyOnce: whatever an event's data holds,
// DecodeData does not panic, and either refuses it as invalid-data poison or took data
// whose every key, at any depth, is spelled exactly as a field of the type (the keys the
// decoded value is written back with) and appears once in its object: no key in another
// case, no key given twice, no unknown key.
func FuzzDecodeDataReadsOnlyTheFieldsItKnowsExactlyOnce(f *testing.F) {
	const data = `{"order_id":"018f2b1e-0000-7000-8000-0000000000aa","customer_email":"ada@example.com","lines":[{"item_id":"018f2b1e-0000-7000-8000-000000000001","quantity":2}]}`
	for _, seed := range []string{
		data,
		strings.Replace(data, `"order_id"`, `"ORDER_ID"`, 1),
		strings.Replace(data, `"quantity"`, `"Quantity"`, 1),
		strings.Replace(data, `"order_id"`, `"order_\u0069d"`, 1), // the same key, escaped
		strings.Replace(data, `{"order_id"`, `{"customer_email":"eve@example.com","order_id"`, 1),
		strings.Replace(data, `"quantity":2`, `"quantity":2,"quantity":3`, 1),
		strings.Replace(data, `"quantity":2`, `"quantity":2,"extra":3`, 1),
		strings.Replace(data, `"lines"`, `"shipping":{},"lines"`, 1),
		strings.Replace(data, `"quantity":2`, `"quantity":1e400`, 1),
		strings.Replace(data, `"ada@example.com"`, `null`, 1),
		strings.Replace(data, `"ada@example.com"`, `{"a":1}`, 1),
		data + "]",
		`{}`, `null`, `[]`, `"x"`, `1`, `{"lines":null}`, `{"lines":[null,{}]}`, `{"lines":[[{"item_id":1}]]}`,
		"{\"customer_email\":\"\xff\"}", `{"customer_email":"\u0000"}`, "", "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d placedData
		err := Envelope{Type: placed, Data: data}.DecodeData(&d)
		if err != nil {
			if reason, ok := IsPoison(err); !ok || reason != ReasonInvalidData {
				t.Fatalf("%q: error not invalid-data poison: %v", data, err)
			}
			return
		}
		got, twice, err := keyPaths(data)
		if err != nil {
			t.Fatalf("%q: accepted, but it does not walk as JSON: %v", data, err)
		}
		if twice {
			t.Fatalf("%q: accepted with a key given twice", data)
		}
		back, _ := json.Marshal(d)
		known, _, _ := keyPaths(back)
		for p := range got {
			if !known[p] {
				t.Fatalf("%q: accepted the key %s, which %T does not write (it writes %s)", data, p, d, back)
			}
		}
	})
}
