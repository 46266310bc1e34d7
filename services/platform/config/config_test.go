package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDefaultsOverridesAndHelp(t *testing.T) {
	c, vars := Standard("ordering", 8081)
	env := map[string]string{"AMQP_URL": "amqp://other/"}
	if err := Parse("ordering", nil, func(k string) string { return env[k] }, nil, vars); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8081" || c.AMQPURL != "amqp://other/" || !strings.Contains(c.DatabaseURL, "ordering@localhost:5432/ordering") {
		t.Errorf("config = %+v", c)
	}

	var out strings.Builder
	_, vars = Standard("ordering", 8081)
	err := Parse("ordering", []string{"--help"}, func(string) string { return "" }, &out, vars)
	if !errors.Is(err, ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	for _, v := range vars {
		if !strings.Contains(out.String(), v.Name) {
			t.Errorf("--help does not list %s", v.Name)
		}
	}
	if err := Parse("ordering", []string{"--nope"}, func(string) string { return "" }, &out, vars); err == nil || errors.Is(err, ErrHelp) {
		t.Errorf("an unknown flag was accepted: %v", err)
	}
	if rest := Rest([]string{"relay"}); len(rest) != 1 || rest[0] != "relay" {
		t.Errorf("Rest = %v", rest)
	}
}

func TestPositiveNumbersAndDurations(t *testing.T) {
	if n, err := Positive("N", "12"); err != nil || n != 12 {
		t.Errorf("Positive(12) = %d, %v", n, err)
	}
	for _, bad := range []string{"0", "-1", "x", ""} {
		if _, err := Positive("N", bad); err == nil || !strings.Contains(err.Error(), "N=") {
			t.Errorf("Positive(%q) = %v, want an error naming N", bad, err)
		}
	}
	if d, err := PositiveDuration("D", "1m30s"); err != nil || d != 90*time.Second {
		t.Errorf("PositiveDuration(1m30s) = %v, %v", d, err)
	}
	for _, bad := range []string{"0s", "-1s", "soon", "30"} {
		if _, err := PositiveDuration("D", bad); err == nil || !strings.Contains(err.Error(), "D=") {
			t.Errorf("PositiveDuration(%q) = %v, want an error naming D", bad, err)
		}
	}
}
