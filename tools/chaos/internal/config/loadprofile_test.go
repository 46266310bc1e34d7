package config

import (
	"io"
	"testing"
)

func TestLoadProfileSetsWhatIsNotGiven(t *testing.T) {
	cfg, err := Parse([]string{"--profile", "load"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Doubled || cfg.Rate != loadProfile.Rate || cfg.Orders != int(loadProfile.Rate)*loadProfile.Seconds ||
		cfg.FaultsPerKind != loadProfile.FaultsPerKind || cfg.Outages != loadProfile.Outages || cfg.Prefix != "chaosload" {
		t.Errorf("profile load gave %+v", cfg)
	}
	cfg, err = Parse([]string{"--profile", "load", "--rate", "100", "--faults", "3", "--prefix", "mine"}, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 100 || cfg.Orders != 100*loadProfile.Seconds || cfg.FaultsPerKind != 3 || cfg.Prefix != "mine" || !cfg.Doubled {
		t.Errorf("flags beside the profile: %+v", cfg)
	}
	if _, err := Parse([]string{"--profile", "heavy"}, io.Discard, false); err == nil {
		t.Error("an unknown profile was accepted")
	}
}
