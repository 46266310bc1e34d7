package faults

import (
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// One long transaction a run holds its snapshot for about half the load, minutes in make
// chaos and seconds in a short run, and its baseline and its hold both end before the
// load does, so that the load runs under the snapshot throughout.
func TestALongTransactionHoldsItsSnapshotForAboutHalfTheLoadAndEndsBeforeIt(t *testing.T) {
	short := config.Default
	short.Orders, short.Rate, short.FaultsPerKind, short.HeavyFaults = 400, 15, 7, 1
	for name, cfg := range map[string]config.Config{"make chaos": config.Default, "a short run": short} {
		span := cfg.LoadDuration()
		var n int
		for _, f := range Schedule(cfg, []string{"ordering-1", "inventory-1", "notification-1"}, []string{"ordering-1-postgres"}) {
			if f.Kind != check.FaultLongTransaction {
				continue
			}
			n++
			if f.Duration < span*2/5-time.Second || f.Duration > span/2+time.Second {
				t.Errorf("%s: held %v of a %v load, want about half", name, f.Duration, span)
			}
			if end := f.At + min(longTxBaseline, f.Duration/3) + f.Duration; end > span {
				t.Errorf("%s: held until %v of a %v load", name, end, span)
			}
		}
		if n != 1 {
			t.Errorf("%s: %d long transactions, want one: a second would hold the first's horizon", name, n)
		}
	}
	if d := config.Default; d.LoadDuration()*2/5 < 90*time.Second {
		t.Errorf("make chaos's load is %v: its long transactions last under a minute and a half", d.LoadDuration())
	}
}

// A long transaction fails its check when notification's median record is much slower
// under the snapshot than before it, as when a claim read an index whole that the
// snapshot kept growing, and passes when it is only as slow as a busier machine makes it.
func TestALongTransactionThatSlowsNotificationsMedianRecordFailsItsCheck(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, c := range []struct {
		name           string
		before, during emailTimes
		slow           bool
	}{
		{"a claim that reads the snapshot's index whole (the soak's fall)", emailTimes{n: 400, p50: ms(16)}, emailTimes{n: 20000, p50: ms(280)}, true},
		{"a busier machine", emailTimes{n: 400, p50: ms(16)}, emailTimes{n: 20000, p50: ms(40)}, false},
		{"five times a fast median, but by less than the slack", emailTimes{n: 400, p50: ms(4)}, emailTimes{n: 20000, p50: ms(20)}, false},
		{"too few records before it to judge", emailTimes{n: 5, p50: ms(16)}, emailTimes{n: 20000, p50: ms(280)}, false},
	} {
		if slow, detail := longTxEmailVerdict(20*time.Minute, c.before, c.during); slow != c.slow {
			t.Errorf("%s: slow %v (%q), want %v", c.name, slow, detail, c.slow)
		}
	}
	if slow, _ := longTxEmailVerdict(11*time.Second, emailTimes{n: 54, p50: ms(15)}, emailTimes{n: 62, p50: ms(150)}); slow {
		t.Error("a hold of 11 s (the smoke run's) judged: its medians are the other faults', not the snapshot's")
	}
}
