package faults

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
)

// consumer_timeout arms a delay of the hold before inventory's commit that fires once:
// one handler held, not every one.
func TestConsumerTimeoutArmsOneDelayOfTheHoldBeforeInventorysCommit(t *testing.T) {
	hold := 6500 * time.Millisecond
	spec := consumerTimeoutFailpoint(hold)
	set, err := failpoint.Parse(spec, contracts.Failpoints)
	if err != nil {
		t.Fatalf("%q: %v", spec, err)
	}
	want := failpoint.Action{Kind: failpoint.Delay, Delay: hold, Probability: 1, Once: true}
	if len(set) != 1 || set[contracts.InventoryBeforeCommit] != want {
		t.Errorf("%q arms %+v, want %s=%+v", spec, set, contracts.InventoryBeforeCommit, want)
	}
}

// The policy times out inventory's queue alone, and keeps the run's delivery limit on it.
func TestConsumerTimeoutPolicyKeepsTheRunsDeliveryLimit(t *testing.T) {
	body, err := consumerTimeoutBody(7)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Pattern    string         `json:"pattern"`
		Definition map[string]any `json:"definition"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(p.Pattern).MatchString(contracts.QueueInventoryOrderPlaced) || regexp.MustCompile(p.Pattern).MatchString(contracts.QueueInventoryOrderPlaced+".dlq") {
		t.Errorf("pattern %q", p.Pattern)
	}
	if p.Definition["consumer-timeout"] != float64(ConsumerTimeout.Milliseconds()) || p.Definition["delivery-limit"] != float64(7) {
		t.Errorf("definition %v", p.Definition)
	}
}

// consumer_timeout reads the consumer's log: the messages it follows are the consumer's
// own, and the reasons it takes for a timeout are the ones each version gives.
func TestConsumerTimeoutFollowsTheConsumersOwnLogMessages(t *testing.T) {
	src, err := os.ReadFile("../../../../services/platform/consumer/session.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{consumerStopped, consumerConsuming} {
		if !strings.Contains(string(src), `"`+msg+`"`) {
			t.Errorf("the consumer no longer logs %q", msg)
		}
	}
	cancelled := regexp.MustCompile(`errors.New\("(the server cancelled the consumer[^"]*)"\)`).FindSubmatch(src)
	if cancelled == nil {
		t.Fatal("the consumer's error for a cancel by the server is gone")
	}
	for _, reason := range []string{
		string(cancelled[1]), // RabbitMQ 4.3
		`Exception (406) Reason: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 2000 ms."`, // 3.x
	} {
		if !timedOut.MatchString(reason) {
			t.Errorf("%q is not taken for a consumer timeout", reason)
		}
	}
	line := `{"time":"2026-12-04T21:00:00Z","level":"WARN","msg":"` + consumerStopped + `","component":"consumer","consumer":"inventory","queue":"` + contracts.QueueInventoryOrderPlaced + `","err":"x"}`
	if msg, errText := consumerLogLine(line); msg != consumerStopped || errText != "x" {
		t.Errorf("consumerLogLine = %q, %q", msg, errText)
	}
	other := strings.Replace(line, contracts.QueueInventoryOrderPlaced, contracts.QueueOrderingStockEvents, 1)
	if msg, _ := consumerLogLine(other); msg != "" {
		t.Errorf("another queue's consumer line taken: %q", msg)
	}
}
