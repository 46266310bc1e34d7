package faults

import (
	"slices"
	"testing"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// Doubled, every service but the provider runs twice, each ordering process is an API
// with its own relay, and every relay has a RELAY_ID of its own.
func TestDoubledLayout(t *testing.T) {
	cfg := config.Default
	cfg.Doubled = true
	specs := cfg.Layout([]string{"I=1"}, []string{"N=1"}, []string{"O=1"})
	var names []string
	relayIDs := map[string]bool{}
	for _, p := range specs {
		names = append(names, p.Name)
		for _, e := range p.Extra {
			if len(e) > 9 && e[:9] == "RELAY_ID=" {
				if relayIDs[e] {
					t.Errorf("%s shares %s", p.Name, e)
				}
				relayIDs[e] = true
			}
		}
	}
	want := []string{"emailprovider", "inventory-1", "inventory-2", "notification-1", "notification-2", "ordering-1", "ordering-2"}
	if !slices.Equal(names, want) {
		t.Errorf("processes %v, want %v", names, want)
	}
	if len(relayIDs) != 4 {
		t.Errorf("RELAY_IDs %v, want one for each of the four relays", relayIDs)
	}
	if got := cfg.OrderingAPIs(); !slices.Equal(got, []string{"ordering-1", "ordering-2"}) {
		t.Errorf("ordering APIs %v", got)
	}
	for fp, targets := range failpointProcesses(cfg) {
		for _, p := range targets {
			if !slices.Contains(names, p) {
				t.Errorf("failpoint %s targets %s, which the doubled layout does not run", fp, p)
			}
		}
		if len(targets) < 2 {
			t.Errorf("failpoint %s targets %v: want both processes of its service", fp, targets)
		}
	}
	// The default layout is the one the default run always had.
	def := config.Default
	if got := def.OrderingAPIs(); !slices.Equal(got, []string{"ordering"}) {
		t.Errorf("default ordering APIs %v", got)
	}
	if got := failpointProcesses(def)[contracts.RelayAfterPublish]; !slices.Equal(got, []string{"inventory-1", "inventory-2", "ordering", "ordering-relay"}) {
		t.Errorf("default relays %v", got)
	}
}
