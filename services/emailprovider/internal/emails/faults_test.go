package emails

import (
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// A latency the server's write timeout cuts off would commit the email and lose the
// response: an ambiguous send nobody asked for.
func TestLatencyStaysBelowTheServersWriteTimeout(t *testing.T) {
	t.Parallel()
	if MaxLatency >= httpapi.WriteTimeout {
		t.Fatalf("MaxLatency %v is not below the write timeout %v", MaxLatency, httpapi.WriteTimeout)
	}
	if _, err := ParseFaults("", "", MaxLatency.String()); err != nil {
		t.Errorf("EMAILPROVIDER_LATENCY=%v: %v, want it taken", MaxLatency, err)
	}
	for _, latency := range []string{(MaxLatency + time.Millisecond).String(), "59s", "-1s"} {
		if _, err := ParseFaults("", "", latency); err == nil || !strings.Contains(err.Error(), "latency") {
			t.Errorf("EMAILPROVIDER_LATENCY=%s: %v, want an error naming latency", latency, err)
		}
		f := FaultSettings{Latency: Duration(mustDuration(t, latency))}
		if problems := f.Valid(); problems["latency"] == "" {
			t.Errorf("PUT /admin/faults latency %s: %v, want a problem naming latency", latency, problems)
		}
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
