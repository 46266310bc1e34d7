package event

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The events of a system made up for these tests: the envelope knows no system's.
const (
	placed  = "shop.order-placed.v1"
	shipped = "shop.order-shipped.v1"
)

type line struct {
	ItemID   uuid.UUID `json:"item_id"`
	Quantity int       `json:"quantity"`
}

type placedData struct {
	OrderID       uuid.UUID `json:"order_id"`
	CustomerEmail string    `json:"customer_email"`
	Lines         []line    `json:"lines"`
}

func validBody(t testing.TB) []byte {
	t.Helper()
	env, err := New("shop/orders", placed, "018f2b1e-0000-7000-8000-0000000000aa", 1,
		placedData{OrderID: uuid.MustParse("018f2b1e-0000-7000-8000-0000000000aa"), CustomerEmail: "ada@example.com",
			Lines: []line{{ItemID: uuid.MustParse("018f2b1e-0000-7000-8000-000000000001"), Quantity: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeClassifiesEveryMessage(t *testing.T) {
	valid := string(validBody(t))
	replace := func(old, new string) string { return strings.Replace(valid, old, new, 1) }
	cases := []struct {
		name, body, reason string
	}{
		{"valid", valid, ""},
		{"not JSON", "this is not json", ReasonNotJSON},
		{"truncated", valid[:len(valid)/2], ReasonNotJSON},
		{"trailing garbage", valid + "{}", ReasonNotJSON},
		{"JSON but an array", "[1,2,3]", ReasonInvalidEnvelope},
		{"wrong specversion", replace(`"specversion":"1.0"`, `"specversion":"0.3"`), ReasonInvalidEnvelope},
		{"id not a UUID", replace(`"id":"`, `"id":"x`), ReasonInvalidEnvelope},
		{"no subject", replace(`"subject":"018f2b1e-0000-7000-8000-0000000000aa"`, `"subject":""`), ReasonInvalidEnvelope},
		{"sequence zero", replace(`"sequence":"1"`, `"sequence":"0"`), ReasonInvalidEnvelope},
		{"sequence not decimal", replace(`"sequence":"1"`, `"sequence":"one"`), ReasonInvalidEnvelope},
		{"no data", replace(`"data":{`, `"nodata":{`), ReasonInvalidEnvelope},
		{"time not a time", replace(`"time":"`, `"time":"yesterday`), ReasonInvalidEnvelope},
		{"unknown type", replace(placed, "shop.order-cancelled.v1"), ReasonUnknownType},
		{"unknown version", replace(placed, "shop.order-placed.v2"), ReasonUnknownType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.body), placed)
			reason, poison := IsPoison(err)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("valid event refused: %v", err)
				}
				return
			}
			if !poison || reason != c.reason {
				t.Fatalf("got %v (reason %q), want poison %q", err, reason, c.reason)
			}
		})
	}
}

func TestDecodeDataIsStrict(t *testing.T) {
	env, err := Decode(validBody(t), placed)
	if err != nil {
		t.Fatal(err)
	}
	var d placedData
	if err := env.DecodeData(&d); err != nil || d.CustomerEmail != "ada@example.com" || len(d.Lines) != 1 {
		t.Fatalf("data %+v, err %v", d, err)
	}
	env.Data = json.RawMessage(`{"order_id":"018f2b1e-0000-7000-8000-0000000000aa","coupon":"X"}`)
	if reason, ok := IsPoison(env.DecodeData(&d)); !ok || reason != ReasonInvalidData {
		t.Errorf("unknown data field: reason %q", reason)
	}
}

func TestContentHashIgnoresFramingButNotMeaning(t *testing.T) {
	env, err := Decode(validBody(t), placed)
	if err != nil {
		t.Fatal(err)
	}
	same := env
	same.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	same.Data = json.RawMessage(strings.ReplaceAll(string(env.Data), ",", " , "))
	if string(same.ContentHash()) != string(env.ContentHash()) {
		t.Error("reformatted data or another trace changed the hash")
	}
	other := env
	other.Data = json.RawMessage(strings.Replace(string(env.Data), `"quantity":2`, `"quantity":3`, 1))
	if string(other.ContentHash()) == string(env.ContentHash()) {
		t.Error("different data, same hash")
	}
}

// FuzzDecode: whatever arrives, Decode never panics and every input is either a valid
// event of a known type or a poison message with a reason. The seed corpus runs in
// `make test`; `go test -fuzz FuzzDecode ./event` explores further.
func FuzzDecode(f *testing.F) {
	f.Add(validBody(f))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"specversion":"1.0","id":"018f2b1e-0000-7000-8000-0000000000aa","data":null}`))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(`{"specversion":"1.0","id":"018F2B1E-0000-7000-8000-0000000000AA","source":"s","type":"shop.order-placed.v1","subject":"x","sequence":"1","time":"2026-11-29T21:00:00Z","data":{}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := Decode(body, placed, shipped)
		if err != nil {
			reason, ok := IsPoison(err)
			if !ok || reason == "" {
				t.Fatalf("error is not classified as poison: %v", err)
			}
			return
		}
		if env.Type != placed && env.Type != shipped {
			t.Fatalf("accepted unknown type %q", env.Type)
		}
		if env.UUID().String() != env.ID {
			t.Fatalf("accepted id %q", env.ID)
		}
		_ = env.ContentHash()
	})
}

// A poison error quotes a message's values in part only: an unknown type, an id, an
// unknown field of 60 KB each make an error (a log line, a span event) of at most about
// MaxDetail bytes that still says what was wrong.
func TestAPoisonErrorQuotesTheMessageInPartOnly(t *testing.T) {
	huge := strings.Repeat("x", 60_000)
	body := string(validBody(t))
	for _, c := range []struct{ name, body, says string }{
		{"unknown type", strings.Replace(body, placed, huge, 1), "is not one of"},
		{"id", strings.Replace(body, `"id":"`, `"id":"`+huge, 1), "is not a UUID"},
		{"sequence", strings.Replace(body, `"sequence":"1"`, `"sequence":"`+huge+`"`, 1), "is not a positive decimal"},
	} {
		_, err := Decode([]byte(c.body), placed)
		if err == nil {
			t.Fatalf("%s: decoded", c.name)
		}
		if msg := err.Error(); len(msg) > MaxDetail+64 || !strings.Contains(msg, c.says) {
			t.Errorf("%s: an error of %d bytes (%.120s…), want at most %d saying %q", c.name, len(msg), msg, MaxDetail+64, c.says)
		}
	}
	env, err := Decode(validBody(t), placed)
	if err != nil {
		t.Fatal(err)
	}
	env.Data = json.RawMessage(`{"` + huge + `":1}`)
	if err := env.DecodeData(&placedData{}); err == nil || len(err.Error()) > MaxDetail+64 {
		t.Errorf("an unknown field of 60 KB: %d bytes of error, want at most %d", len(err.Error()), MaxDetail+64)
	}
}
