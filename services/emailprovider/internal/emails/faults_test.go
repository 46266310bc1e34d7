package emails

import (
	"strings"
	"testing"
	"time"
)

// A latency above MaxLatency is refused, from the environment and from PUT /admin/faults
// alike (internal/api checks MaxLatency against the server's write timeout).
func TestLatencyAboveMaxLatencyIsRefused(t *testing.T) {
	t.Parallel()
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
