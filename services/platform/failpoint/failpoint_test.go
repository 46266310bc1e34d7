package failpoint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The failpoints of a system made up for these tests: the package knows no system's.
const (
	shopBeforeCommit  = "shop/before-commit"
	relayAfterPublish = "relay/after-publish"
	stockAfterCommit  = "stock/after-commit"
	mailAfterSend     = "mail/after-send"
	shopAfterCommit   = "shop/after-commit"
)

var names = []string{shopBeforeCommit, relayAfterPublish, stockAfterCommit, mailAfterSend, shopAfterCommit}

func TestParseReadsEveryActionAndProbability(t *testing.T) {
	set, err := Parse("shop/before-commit=crash; relay/after-publish=p(0.25)*error;stock/after-commit=delay(50ms)", names)
	if err != nil {
		t.Fatal(err)
	}
	want := Set{
		shopBeforeCommit:  {Kind: Crash, Probability: 1},
		relayAfterPublish: {Kind: Error, Probability: 0.25},
		stockAfterCommit:  {Kind: Delay, Delay: 50 * time.Millisecond, Probability: 1},
	}
	if len(set) != len(want) {
		t.Fatalf("got %v", set)
	}
	for name, a := range want {
		if set[name] != a {
			t.Errorf("%s = %+v, want %+v", name, set[name], a)
		}
	}
	for _, bad := range []string{
		"shop/before-comit=crash", // a typo must not silently test nothing
		"shop/before-commit",
		"shop/before-commit=explode",
		"shop/before-commit=p(2)*crash",
		"shop/before-commit=p(0.5)crash",
		"shop/before-commit=delay(soon)",
	} {
		if _, err := Parse(bad, names); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestInjectCrashesFailsOrDelaysAsConfigured(t *testing.T) {
	crashed := 0
	orig := crash
	crash = func() { crashed++ }
	t.Cleanup(func() { crash = orig; _ = Configure("", names) })

	ctx := context.Background()
	if err := Configure("", names); err != nil {
		t.Fatal(err)
	}
	if err := Inject(ctx, shopBeforeCommit); err != nil {
		t.Fatalf("unconfigured failpoint: %v", err)
	}
	if err := Configure("shop/before-commit=crash;relay/after-publish=error;stock/after-commit=delay(30ms);mail/after-send=p(0)*error", names); err != nil {
		t.Fatal(err)
	}
	if err := Inject(ctx, shopBeforeCommit); err != nil || crashed != 1 {
		t.Errorf("crash: err %v, crashed %d", err, crashed)
	}
	if err := Inject(ctx, relayAfterPublish); !errors.Is(err, ErrInjected) {
		t.Errorf("error action returned %v", err)
	}
	start := time.Now()
	if err := Inject(ctx, stockAfterCommit); err != nil || time.Since(start) < 30*time.Millisecond {
		t.Errorf("delay: err %v after %v", err, time.Since(start))
	}
	for range 100 {
		if err := Inject(ctx, mailAfterSend); err != nil {
			t.Fatalf("p(0) fired: %v", err)
		}
	}
	if err := Inject(ctx, shopAfterCommit); err != nil {
		t.Errorf("a failpoint not in the set fired: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := Configure("stock/after-commit=delay(1h)", names); err != nil {
		t.Fatal(err)
	}
	if err := Inject(cancelled, stockAfterCommit); !errors.Is(err, context.Canceled) {
		t.Errorf("delay ignored the context: %v", err)
	}
}

func TestProbabilityFiresSometimes(t *testing.T) {
	t.Cleanup(func() { _ = Configure("", names) })
	if err := Configure("relay/after-publish=p(0.5)*error", names); err != nil {
		t.Fatal(err)
	}
	fired := 0
	for range 2000 {
		if Inject(context.Background(), relayAfterPublish) != nil {
			fired++
		}
	}
	if fired < 800 || fired > 1200 {
		t.Errorf("p(0.5) fired %d times in 2000", fired)
	}
}

// BenchmarkInjectUnset is the cost of a failpoint in production, where none is set,
// against an empty function call as the baseline.
func BenchmarkInjectUnset(b *testing.B) {
	_ = Configure("", names)
	ctx := context.Background()
	var sink error
	start := time.Now()
	for i := 0; i < b.N; i++ {
		sink = noop(ctx, shopBeforeCommit)
	}
	base := time.Since(start)
	b.ResetTimer()
	start = time.Now()
	for i := 0; i < b.N; i++ {
		sink = Inject(ctx, shopBeforeCommit)
	}
	b.ReportMetric(float64(time.Since(start))/float64(max(base, 1)), "inject/noop")
	_ = sink
}

//go:noinline
func noop(context.Context, string) error { return nil }

// A once* failpoint fires the first time only, across goroutines, until it is configured
// again; with p(…) the first time is the first draw that fires.
func TestOnceFiresTheFirstTimeOnlyUntilConfiguredAgain(t *testing.T) {
	t.Cleanup(func() { _ = Configure("", names) })
	spec := "mail/after-send=once*p(0.5)*error;relay/after-publish=once*error" // String's order
	set, err := Parse(spec, names)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Action{Kind: Error, Probability: 0.5, Once: true}); set[mailAfterSend] != want {
		t.Fatalf("%s = %+v, want %+v", mailAfterSend, set[mailAfterSend], want)
	}
	if got := set.String(); got != spec {
		t.Errorf("String() = %q, want %q", got, spec)
	}
	for _, bad := range []string{"relay/after-publish=p(0.5)*once*error", "relay/after-publish=once*once*error", "relay/after-publish=once*"} {
		if _, err := Parse(bad, names); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
	for round := range 2 {
		if err := Configure(spec, names); err != nil {
			t.Fatal(err)
		}
		var fired [2]atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					for i, name := range []string{relayAfterPublish, mailAfterSend} {
						if errors.Is(Inject(context.Background(), name), ErrInjected) {
							fired[i].Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		if fired[0].Load() != 1 || fired[1].Load() != 1 {
			t.Errorf("configuration %d: once*error fired %d times, once*p(0.5)*error %d times, want once each", round+1, fired[0].Load(), fired[1].Load())
		}
	}
}
