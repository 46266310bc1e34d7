package config

import (
	"io"
	"testing"
	"time"
)

func TestTheSoakProfileSpreadsEveryFaultKindThinlyOverItsDuration(t *testing.T) {
	cfg, err := Parse([]string{"--profile", "soak"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Soak.On || !cfg.Soak.MeasureRate || cfg.Soak.Duration != 30*time.Minute || cfg.SoakWindows() != 6 {
		t.Errorf("soak defaults: %+v", cfg.Soak)
	}
	if cfg.FaultsPerKind != 10 || cfg.HeavyFaultsEach() != 2 || cfg.Outages != 2 || cfg.Prefix != "chaossoak" {
		t.Errorf("soak faults: %d per kind, %d heavy, %d outages, prefix %q", cfg.FaultsPerKind, cfg.HeavyFaultsEach(), cfg.Outages, cfg.Prefix)
	}
	if !cfg.OwnPostgres() {
		t.Errorf("the soak runs on the machine's Postgres (%s), not one of its own with autovacuum on", cfg.AdminURL)
	}
}

func TestASoakGivenAPostgresURLRunsOnThatServer(t *testing.T) {
	url := "postgres://postgres@127.0.0.1:5432/postgres"
	cfg, err := Parse([]string{"--profile", "soak", "--postgres", url}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OwnPostgres() || cfg.AdminURL != url {
		t.Errorf("-postgres %s given, the soak runs on %q", url, cfg.AdminURL)
	}
}

func TestASoakGivenItsRateMeasuresNothingAndPlacesRateTimesDuration(t *testing.T) {
	cfg, err := Parse([]string{"--profile", "soak", "--rate", "25", "--duration", "6m", "--window", "2m"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Soak.MeasureRate || cfg.Orders != 25*360 || cfg.SoakWindows() != 3 {
		t.Errorf("soak at a given rate: measure %v, %d orders, %d windows", cfg.Soak.MeasureRate, cfg.Orders, cfg.SoakWindows())
	}
	if cfg.FaultsPerKind != 2 || cfg.HeavyFaultsEach() != 1 || cfg.Outages != 1 {
		t.Errorf("a short soak still strikes with every kind: %d per kind, %d heavy, %d outages", cfg.FaultsPerKind, cfg.HeavyFaultsEach(), cfg.Outages)
	}
	cfg.SetSoakRate(40)
	if cfg.Orders != 40*360 {
		t.Errorf("SetSoakRate(40) left %d orders", cfg.Orders)
	}
}

func TestASoakShorterThanTwoWindowsIsRefused(t *testing.T) {
	if _, err := Parse([]string{"--profile", "soak", "--duration", "5m", "--window", "3m"}, io.Discard, false); err == nil {
		t.Error("a soak of one window was accepted")
	}
}
