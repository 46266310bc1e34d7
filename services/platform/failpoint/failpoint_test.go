package failpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestParseReadsEveryActionAndProbability(t *testing.T) {
	set, err := Parse("ordering/before-commit=crash; relay/after-publish=p(0.25)*error;inventory/after-commit=delay(50ms)")
	if err != nil {
		t.Fatal(err)
	}
	want := Set{
		OrderingBeforeCommit: {Kind: Crash, Probability: 1},
		RelayAfterPublish:    {Kind: Error, Probability: 0.25},
		InventoryAfterCommit: {Kind: Delay, Delay: 50 * time.Millisecond, Probability: 1},
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
		"ordering/before-comit=crash", // a typo must not silently test nothing
		"ordering/before-commit",
		"ordering/before-commit=explode",
		"ordering/before-commit=p(2)*crash",
		"ordering/before-commit=p(0.5)crash",
		"ordering/before-commit=delay(soon)",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

func TestInjectCrashesFailsOrDelaysAsConfigured(t *testing.T) {
	crashed := 0
	orig := crash
	crash = func() { crashed++ }
	t.Cleanup(func() { crash = orig; _ = Configure("") })

	ctx := context.Background()
	if err := Configure(""); err != nil {
		t.Fatal(err)
	}
	if err := Inject(ctx, OrderingBeforeCommit); err != nil {
		t.Fatalf("unconfigured failpoint: %v", err)
	}
	if err := Configure("ordering/before-commit=crash;relay/after-publish=error;inventory/after-commit=delay(30ms);notification/after-send=p(0)*error"); err != nil {
		t.Fatal(err)
	}
	if err := Inject(ctx, OrderingBeforeCommit); err != nil || crashed != 1 {
		t.Errorf("crash: err %v, crashed %d", err, crashed)
	}
	if err := Inject(ctx, RelayAfterPublish); !errors.Is(err, ErrInjected) {
		t.Errorf("error action returned %v", err)
	}
	start := time.Now()
	if err := Inject(ctx, InventoryAfterCommit); err != nil || time.Since(start) < 30*time.Millisecond {
		t.Errorf("delay: err %v after %v", err, time.Since(start))
	}
	for range 100 {
		if err := Inject(ctx, NotificationAfterSend); err != nil {
			t.Fatalf("p(0) fired: %v", err)
		}
	}
	if err := Inject(ctx, OrderingAfterCommit); err != nil {
		t.Errorf("a failpoint not in the set fired: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := Configure("inventory/after-commit=delay(1h)"); err != nil {
		t.Fatal(err)
	}
	if err := Inject(cancelled, InventoryAfterCommit); !errors.Is(err, context.Canceled) {
		t.Errorf("delay ignored the context: %v", err)
	}
}

func TestProbabilityFiresSometimes(t *testing.T) {
	t.Cleanup(func() { _ = Configure("") })
	if err := Configure("relay/after-publish=p(0.5)*error"); err != nil {
		t.Fatal(err)
	}
	fired := 0
	for range 2000 {
		if Inject(context.Background(), RelayAfterPublish) != nil {
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
	_ = Configure("")
	ctx := context.Background()
	var sink error
	start := time.Now()
	for i := 0; i < b.N; i++ {
		sink = noop(ctx, OrderingBeforeCommit)
	}
	base := time.Since(start)
	b.ResetTimer()
	start = time.Now()
	for i := 0; i < b.N; i++ {
		sink = Inject(ctx, OrderingBeforeCommit)
	}
	b.ReportMetric(float64(time.Since(start))/float64(max(base, 1)), "inject/noop")
	_ = sink
}

//go:noinline
func noop(context.Context, string) error { return nil }
