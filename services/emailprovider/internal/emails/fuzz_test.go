package emails

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/testenv/httpapitest"
)

// FuzzSendRequestIsAcceptedOnlyWhenValid: whatever the body of POST /v1/emails, the
// provider answers a 400, 413 or 422 with a detail, never a 5xx, or takes an email that
// keeps docs/contracts.md, checked here without Valid's help: to a plain address of at
// most 254 characters, a subject of one line of at most 998 characters, a text of at most
// 32 KiB, all three present and storable.
func FuzzSendRequestIsAcceptedOnlyWhenValid(f *testing.F) {
	valid := `{"to":"ada@example.com","subject":"Your order is confirmed","text":"Hello,\n\nthanks.\n"}`
	for _, seed := range []string{
		valid,
		strings.Replace(valid, "ada@", `ada\u0000@`, 1),
		strings.Replace(valid, "ada@", "ada\xff@", 1),
		strings.Replace(valid, "ada@example.com", "Ada <ada@example.com>", 1),
		strings.Replace(valid, "ada@example.com", "ada@example.com (Ada)", 1),
		strings.Replace(valid, "ada@example.com", `\"a d a\"@example.com`, 1),
		strings.Replace(valid, "ada@example.com", "ada@[127.0.0.1]", 1),
		strings.Replace(valid, "ada@example.com", `ada@example.com\r\nBcc: eve@example.com`, 1),
		strings.Replace(valid, "Your order", `Your\r\nBcc: eve@example.com\r\n order`, 1),
		strings.Replace(valid, "Your order", `Your\u2028order`, 1),
		strings.Replace(valid, "Your order", `Your\u0000order`, 1),
		strings.Replace(valid, "Your order is confirmed", strings.Repeat("s", 998), 1),
		strings.Replace(valid, "Your order is confirmed", strings.Repeat("s", 999), 1),
		strings.Replace(valid, "Your order is confirmed", strings.Repeat("é", 998), 1),
		strings.Replace(valid, `Hello,\n\nthanks.\n`, strings.Repeat("t", 32<<10), 1),
		strings.Replace(valid, `Hello,\n\nthanks.\n`, strings.Repeat("t", 32<<10+1), 1),
		strings.Replace(valid, `Hello,`, `Hello\u0000`, 1),
		strings.Replace(valid, `"to"`, `"To"`, 1),
		strings.Replace(valid, `{"to"`, `{"to":"eve@example.com","to"`, 1),
		strings.Replace(valid, `"text":`, `"html":"<b>x</b>","text":`, 1),
		strings.Replace(valid, `"Your order is confirmed"`, `1e400`, 1),
		valid + "]", valid + "{}",
		`{"to":"ada@example.com","subject":"s","text":""}`,
		`{"to":null,"subject":"s","text":"t"}`,
		"", "null", "[]", "{}", `"x"`, "\xff", strings.Repeat("[", 5000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var req Request
		p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPost, "/v1/emails", strings.NewReader(body)), &req)
		if p != nil {
			httpapitest.RequireClientProblem(t, body, p)
			return
		}
		switch {
		case !httpapitest.PlainAddress(req.To):
			t.Fatalf("%q: accepted to %q", body, req.To)
		case req.Subject == "" || len(req.Subject) > 998 || strings.ContainsAny(req.Subject, "\r\n") || !httpapitest.Storable(req.Subject):
			t.Fatalf("%q: accepted subject %q", body, req.Subject)
		case req.Text == "" || len(req.Text) > 32<<10 || !httpapitest.Storable(req.Text):
			t.Fatalf("%q: accepted text of %d bytes", body, len(req.Text))
		}
	})
}

// faultsWithinBounds is the contract's rule for faults, checked without Valid: rates
// from 0 to 1 (NaN is not a rate), a latency from 0s to MaxLatency (20s).
func faultsWithinBounds(s FaultSettings) bool {
	rate := func(r float64) bool { return !math.IsNaN(r) && r >= 0 && r <= 1 }
	return rate(s.FailRate) && rate(s.AmbiguousRate) && s.Latency >= 0 && time.Duration(s.Latency) <= 20*time.Second && MaxLatency <= 20*time.Second
}

// FuzzFaultSettingsAreAcceptedOnlyWithinBounds: whatever the body of PUT /admin/faults,
// the provider answers a 400, 413 or 422 with a detail, never a 5xx, or takes faults
// within the contract's bounds; and what it takes, GET /admin/faults shows in a form the
// PUT takes back as the same faults.
func FuzzFaultSettingsAreAcceptedOnlyWithinBounds(f *testing.F) {
	for _, seed := range []string{
		`{"fail_rate":0.2,"ambiguous_rate":0.1,"latency":"250ms"}`,
		`{"fail_rate":0,"ambiguous_rate":0,"latency":"0s"}`,
		`{"fail_rate":1,"ambiguous_rate":1,"latency":"1s"}`,
		`{"latency":250}`,
		`{"latency":1e300}`,
		`{"latency":-1e300}`,
		`{"latency":9.3e15}`,
		`{"latency":9223372036854.775807}`,
		`{"latency":"20s"}`,
		`{"latency":20000}`,
		`{"latency":20000.000001}`,
		`{"latency":"20.000000001s"}`,
		`{"latency":"-0s"}`,
		`{"latency":"99999999999999999999h"}`,
		`{"latency":"1\u0000s"}`,
		`{"latency":true}`,
		`{"latency":null}`,
		`{"latency":{"a":1,"a":2}}`,
		`{"fail_rate":1e400}`,
		`{"fail_rate":-0}`,
		`{"fail_rate":1.0000000000000002}`,
		`{"fail_rate":"0.5"}`,
		`{"Fail_Rate":0.5}`,
		`{"fail_rate":0.5,"fail_rate":2}`,
		`{"fail_rate":0.5}]`,
		"", "null", "[]", "{}", "\xff", strings.Repeat("[", 5000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var s FaultSettings
		p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPut, "/admin/faults", strings.NewReader(body)), &s)
		if p != nil {
			httpapitest.RequireClientProblem(t, body, p)
			return
		}
		if !faultsWithinBounds(s) {
			t.Fatalf("%q: accepted %+v", body, s)
		}
		shown := httptest.NewRecorder()
		httpapi.WriteJSON(shown, http.StatusOK, s)
		var back FaultSettings
		if p := httpapi.DecodeValid(httptest.NewRequest(http.MethodPut, "/admin/faults", shown.Body), &back); p != nil || !sameFaults(back, s) {
			t.Fatalf("%q: accepted as %+v, shown as %s, which reads back as %+v, %+v", body, s, shown.Body, back, p)
		}
	})
}

// FuzzFaultsFromTheEnvironmentAreAcceptedOnlyWithinBounds: whatever EMAILPROVIDER_FAIL_RATE,
// EMAILPROVIDER_AMBIGUOUS_RATE and EMAILPROVIDER_LATENCY hold, ParseFaults does not
// panic; it refuses them with an error naming the variable or field at fault, or returns
// faults within the contract's bounds.
func FuzzFaultsFromTheEnvironmentAreAcceptedOnlyWithinBounds(f *testing.F) {
	for _, seed := range [][3]string{
		{"", "", ""},
		{"0.1", "0.05", "250ms"},
		{"NaN", "", ""},
		{"", "nan", ""},
		{"Inf", "-Inf", ""},
		{"1e400", "", ""},
		{"0x1p-2", "", ""},
		{"1_0", "", ""},
		{"-0", "", "-0s"},
		{"", "", "20s"},
		{"", "", "20.000000001s"},
		{"", "", "1m"},
		{"", "", "-1ns"},
		{"", "", "2562047h47m16.854775808s"},
		{"", "", "250"},
		{"0.5\x00", "", "1s\x00"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, failRate, ambiguousRate, latency string) {
		s, err := ParseFaults(failRate, ambiguousRate, latency)
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "EMAILPROVIDER_") && !strings.Contains(msg, "rate") && !strings.Contains(msg, "latency") {
				t.Fatalf("%q %q %q: the error names nothing: %v", failRate, ambiguousRate, latency, err)
			}
			return
		}
		if !faultsWithinBounds(s) {
			t.Fatalf("%q %q %q: accepted %+v", failRate, ambiguousRate, latency, s)
		}
	})
}

// sameFaults compares two settings field by field; an empty refuse_to is written as none.
func sameFaults(a, b FaultSettings) bool {
	return slices.Equal(a.RefuseTo, b.RefuseTo) && a.FailRate == b.FailRate && a.AmbiguousRate == b.AmbiguousRate && a.Latency == b.Latency
}
