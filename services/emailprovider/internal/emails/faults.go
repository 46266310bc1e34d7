package emails

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
)

// AmbiguousStall is how long the ambiguous fault holds a response after sending: longer
// than any sane client timeout. It ends early when the client gives up.
const AmbiguousStall = 30 * time.Second

// MaxLatency is the longest injected latency: shorter than the server's write timeout
// (httpapi.WriteTimeout, 30 s) with room left for the send, so a slow provider answers
// late but answers. A latency past the write timeout would commit the email and lose
// the response: the ambiguous fault, made by accident where AmbiguousRate makes it on
// purpose and counts it.
const MaxLatency = 20 * time.Second

// FaultSettings are the provider's injected faults, as GET and PUT /admin/faults show them.
type FaultSettings struct {
	// FailRate is the share of sends answered 503 without sending.
	FailRate float64 `json:"fail_rate"`
	// AmbiguousRate is the share of sends that send, commit, and then stall past the
	// caller's timeout, so the caller cannot know the email went out.
	AmbiguousRate float64 `json:"ambiguous_rate"`
	// Latency delays every API request; a send spends it holding its key.
	Latency Duration `json:"latency"`
	// RefuseTo lists recipients every send to which is refused for good (422, nothing
	// sent): a mailbox that does not exist, with everything else healthy.
	RefuseTo []string `json:"refuse_to,omitempty"`
}

// Refuses reports whether the settings refuse every send to recipient.
func (f FaultSettings) Refuses(recipient string) bool {
	return slices.Contains(f.RefuseTo, recipient)
}

// Valid returns a problem per invalid field; empty when valid.
func (f FaultSettings) Valid() map[string]string {
	problems := map[string]string{}
	// Written as "not within" so that NaN (EMAILPROVIDER_FAIL_RATE=NaN parses) is refused.
	if !(f.FailRate >= 0 && f.FailRate <= 1) {
		problems["fail_rate"] = "must be between 0 and 1"
	}
	if !(f.AmbiguousRate >= 0 && f.AmbiguousRate <= 1) {
		problems["ambiguous_rate"] = "must be between 0 and 1"
	}
	if f.Latency < 0 || time.Duration(f.Latency) > MaxLatency {
		problems["latency"] = "must be between 0s and " + MaxLatency.String()
	}
	if slices.Contains(f.RefuseTo, "") {
		problems["refuse_to"] = "must not contain an empty address"
	}
	return problems
}

// ParseFaults reads the EMAILPROVIDER_* variables; empty values mean no fault.
func ParseFaults(failRate, ambiguousRate, latency string) (FaultSettings, error) {
	var f FaultSettings
	var err error
	if failRate != "" {
		if f.FailRate, err = strconv.ParseFloat(failRate, 64); err != nil {
			return f, fmt.Errorf("EMAILPROVIDER_FAIL_RATE=%q: %w", failRate, err)
		}
	}
	if ambiguousRate != "" {
		if f.AmbiguousRate, err = strconv.ParseFloat(ambiguousRate, 64); err != nil {
			return f, fmt.Errorf("EMAILPROVIDER_AMBIGUOUS_RATE=%q: %w", ambiguousRate, err)
		}
	}
	if latency != "" {
		d, err := time.ParseDuration(latency)
		if err != nil {
			return f, fmt.Errorf("EMAILPROVIDER_LATENCY=%q: %w", latency, err)
		}
		f.Latency = Duration(d)
	}
	if problems := f.Valid(); len(problems) > 0 {
		return f, fmt.Errorf("emailprovider faults: %v", problems)
	}
	return f, nil
}

// Faults holds the current settings; the admin API changes them while requests run.
type Faults struct {
	mu       sync.Mutex
	cur      FaultSettings
	stopping <-chan struct{}
}

// NewFaults returns faults starting at initial. Stalls end when stopping closes, so a
// provider asked to shut down is not held up by the ambiguous fault.
func NewFaults(initial FaultSettings, stopping <-chan struct{}) *Faults {
	return &Faults{cur: initial, stopping: stopping}
}

// Get returns the current settings.
func (f *Faults) Get() FaultSettings {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// Set replaces the settings; the caller has checked Valid.
func (f *Faults) Set(s FaultSettings) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = s
}

// faultRoll is what the faults decided for one request.
type faultRoll struct {
	fail, ambiguous bool
	latency         time.Duration
}

func (f *Faults) roll() faultRoll {
	s := f.Get()
	return faultRoll{
		fail:      s.FailRate > 0 && rand.Float64() < s.FailRate,
		ambiguous: s.AmbiguousRate > 0 && rand.Float64() < s.AmbiguousRate,
		latency:   time.Duration(s.Latency),
	}
}

// stall holds a response for AmbiguousStall, or until the caller gives up, or until the
// provider is stopping.
func (f *Faults) stall(ctx context.Context) error {
	t := time.NewTimer(AmbiguousStall)
	defer t.Stop()
	select {
	case <-t.C:
	case <-f.stopping:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Duration is a time.Duration written in JSON as Go writes durations: "250ms".
type Duration time.Duration

// MarshalJSON writes "250ms".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "250ms", or a number of milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var ms float64
		if err := json.Unmarshal(b, &ms); err != nil {
			return fmt.Errorf("latency: want a duration such as \"250ms\"")
		}
		// A float outside int64's range converts to whatever the CPU makes of it (on
		// amd64 the most negative duration), so refuse it before converting.
		ns := ms * float64(time.Millisecond)
		if !(ns > math.MinInt64 && ns < math.MaxInt64) {
			return fmt.Errorf("latency: %v ms is out of range", ms)
		}
		*d = Duration(ns)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	*d = Duration(v)
	return nil
}
