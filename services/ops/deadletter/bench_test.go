package deadletter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/ops/deadletter"
)

// BenchmarkListAndReplayOfAThousandDeadLetters measures what an operator waits for: the
// list of 1,000 dead letters, then their replay, which waits for the broker's confirm of
// each copy before it acks the original. It reports messages per second of each.
func BenchmarkListAndReplayOfAThousandDeadLetters(b *testing.B) {
	const n = 1000
	var listRate, replayRate float64
	for range b.N {
		b.StopTimer()
		r := newRabbit(b)
		for i := range n {
			dc, err := r.ch.PublishWithDeferredConfirmWithContext(context.Background(), "", deadletter.DLQ(work), true, false, message(fmt.Sprintf("m%04d", i)))
			must(b, err)
			if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
				b.Fatalf("put in the DLQ: acked %v, %v", ok, err)
			}
		}
		b.StartTimer()

		start := time.Now()
		msgs, err := deadletter.List(context.Background(), r.channel(b), work)
		if err != nil || len(msgs) != n {
			b.Fatalf("List = %d messages, %v", len(msgs), err)
		}
		listRate += n / time.Since(start).Seconds()
		start = time.Now()
		moved, err := deadletter.Replay(context.Background(), r.channel(b), work)
		if err != nil || moved != n {
			b.Fatalf("Replay = %d, %v", moved, err)
		}
		replayRate += n / time.Since(start).Seconds()
	}
	b.ReportMetric(listRate/float64(b.N), "listed/s")
	b.ReportMetric(replayRate/float64(b.N), "replayed/s")
}
