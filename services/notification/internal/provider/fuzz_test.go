package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// answer is a RoundTripper that gives every request the same response.
type answer struct {
	status   int
	replayed string
	body     []byte
}

func (a answer) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if a.replayed != "" {
		h["Idempotent-Replayed"] = []string{a.replayed}
	}
	return &http.Response{
		Status: http.StatusText(a.status), StatusCode: a.status, Header: h, Request: r,
		Body: io.NopCloser(bytes.NewReader(a.body)), ContentLength: int64(len(a.body)),
	}, nil
}

func fakeClient(a answer) *Client {
	h, _ := noop.NewMeterProvider().Meter("fuzz").Float64Histogram("d")
	return &Client{base: "http://provider.invalid", timeout: time.Second, http: &http.Client{Transport: a}, duration: h}
}

// FuzzProviderAnswerIsAcceptedOnlyWhenWellFormed: whatever the provider answers (any
// status, the Idempotent-Replayed header, any body), Send and Lookup do not panic, and:
// a success is the status the contract gives (202 for a send, 200 for a lookup) with a
// JSON body carrying a non-empty id of storable text, never a success with zero values;
// Send's refusal is ErrRejected exactly for 400, 413 and 422; a lookup's 404 is "not
// found" without an error; every other answer is an error; and every error reads as
// storable text, since the record keeps it as last_error.
func FuzzProviderAnswerIsAcceptedOnlyWhenWellFormed(f *testing.F) {
	const ok = `{"id":"018f2b1e-0000-7000-8000-0000000000aa","idempotency_key":"order/018f2b1e-0000-7000-8000-0000000000aa/order-confirmed","status":"sent","created_at":"2026-11-29T21:00:00Z"}`
	for _, seed := range []struct {
		status         int
		replayed, body string
	}{
		{202, "", ok},
		{202, "true", ok},
		{202, "TRUE", ok},
		{200, "", ok},
		{201, "", ok},
		{204, "", ""},
		{202, "", ""},
		{202, "", "null"},
		{202, "", "{}"},
		{202, "", `{"id":""}`},
		{202, "", `{"id":null}`},
		{202, "", `{"id":42}`},
		{202, "", `{"id":"\u0000"}`},
		{202, "", "{\"id\":\"\xff\"}"},
		{202, "", `{"ID":"x"}`},
		{202, "", `{"id":"x","id":""}`},
		{202, "", ok + "]"},
		{202, "", ok + ok},
		{202, "", `[` + ok + `]`},
		{202, "", "<html>502 Bad Gateway</html>"},
		{202, "", strings.Repeat("[", 10000)},
		{400, "", `{"type":"x","status":400,"detail":"to: must be a plain email address"}`},
		{413, "", "too large"},
		{422, "", "\x00\xff"},
		{404, "", ""},
		{409, "", "in flight"},
		{429, "", ""},
		{500, "", "\xff\xfe\x00 oops"},
		{503, "", ""},
		{999, "", ""},
		{100, "", ""},
		{301, "", ""},
	} {
		f.Add(seed.status, seed.replayed, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, status int, replayed string, body []byte) {
		if status < 100 || status > 999 {
			status = 100 + (status%900+900)%900
		}
		if strings.ContainsAny(replayed, "\r\n\x00") {
			replayed = ""
		}
		c := fakeClient(answer{status: status, replayed: replayed, body: body})
		ctx := context.Background()

		acc, err := c.Send(ctx, "order/k/order-confirmed", Message{To: "ada@example.com", Subject: "s", Text: "t"})
		switch {
		case err != nil:
			if !httpapitest.Storable(err.Error()) {
				t.Fatalf("%d %q: the error %q is not storable text", status, body, err)
			}
			rejected := status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity
			if errors.Is(err, ErrRejected) != rejected {
				t.Fatalf("%d %q: ErrRejected is %v", status, body, errors.Is(err, ErrRejected))
			}
		case status != http.StatusAccepted:
			t.Fatalf("%d %q: a send answered %d succeeded", status, body, status)
		case !json.Valid(body) || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")):
			t.Fatalf("%d %q: a body that is not a JSON object succeeded", status, body)
		case acc.ID == "" || !httpapitest.Storable(acc.ID):
			t.Fatalf("%d %q: succeeded with id %q", status, body, acc.ID)
		case acc.Replayed != (replayed == "true"):
			t.Fatalf("%d %q: Idempotent-Replayed %q read as %v", status, body, replayed, acc.Replayed)
		}

		acc, found, err := c.Lookup(ctx, "order/k/order-confirmed")
		switch {
		case err != nil:
			if found || acc != (Accepted{}) {
				t.Fatalf("%d %q: an error and an answer %+v", status, body, acc)
			}
			if !httpapitest.Storable(err.Error()) {
				t.Fatalf("%d %q: the error %q is not storable text", status, body, err)
			}
			if status == http.StatusNotFound {
				t.Fatalf("%d %q: a 404 is an error: %v", status, body, err)
			}
		case !found:
			if status != http.StatusNotFound {
				t.Fatalf("%d %q: not found without a 404", status, body)
			}
		case status != http.StatusOK:
			t.Fatalf("%d %q: a lookup answered %d found the email", status, body, status)
		case !json.Valid(body) || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")):
			t.Fatalf("%d %q: a body that is not a JSON object was found", status, body)
		case acc.ID == "" || !httpapitest.Storable(acc.ID):
			t.Fatalf("%d %q: found with id %q", status, body, acc.ID)
		}
	})
}
