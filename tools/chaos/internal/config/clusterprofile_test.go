package config

import (
	"io"
	"testing"
)

func TestTheClusterProfileDoublesTheServicesAndRefusesItsFlagsWithoutIt(t *testing.T) {
	cfg, err := Parse([]string{"--profile", "cluster"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Cluster || !cfg.Doubled || cfg.RelayMaxAttempts != Default.RelayMaxAttempts || cfg.NodeLosses != clusterProfile.NodeLosses || cfg.Failovers != clusterProfile.Failovers || cfg.Prefix != "chaoscluster" {
		t.Errorf("profile cluster gave %+v", cfg)
	}
	if _, err := Parse([]string{"--failovers", "2"}, io.Discard, false); err == nil {
		t.Error("-failovers without the cluster was accepted")
	}
	if _, err := Parse([]string{"--profile", "cluster", "--relay-max-attempts", "3", "--node-down", "1s"}, io.Discard, false); err == nil {
		t.Error("a stopped node shorter than the relays' shrunk budget was accepted")
	}
}
