package testenv

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Metric reads base's /metrics (Prometheus text format) and returns the sum of every
// series of the metric name whose labels include each of the given pairs, written as they
// appear there (`consumer="ordering"`, `outcome="found"`); 0 when there is none. A counter
// of the OpenTelemetry SDK appears only once it has counted, so absent and zero are the
// same here.
func Metric(t testing.TB, base, name string, labels ...string) float64 {
	t.Helper()
	v, _ := MetricOK(t, base, name, labels...)
	return v
}

// MetricOK is Metric, and also reports whether any series matched: for a gauge, where a
// 0 that was never reported is not the 0 a test waits for.
func MetricOK(t testing.TB, base, name string, labels ...string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(line, l)
		}
		if !matches {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("metrics: %s: %v", line, err)
		}
		sum, found = sum+v, true
	}
	return sum, found
}
