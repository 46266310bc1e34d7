package orders_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// BenchmarkPlaceOrderPipelinedAgainstPlain places orders with an Idempotency-Key one at
// a time, as a single client does, taking turns between the fast form, the plain form
// and the plain form without pgdb.RegisterTypes ("before"), on databases of their own,
// so that all see the same machine at the same moments. It reports each form's median
// latency, its orders/s at concurrency 1, the CPU this process spent per order and, when
// Postgres runs on this machine, the CPU of the form's Postgres backend per order, and
// the fast form's ratios to the others.
//
//	CI=true go test -run '^$' -bench PlaceOrderPipelinedAgainstPlain -benchtime 2000x ./services/ordering/internal/orders/
func BenchmarkPlaceOrderPipelinedAgainstPlain(b *testing.B) {
	ctx := context.Background()
	// before: the plain form on a pool without pgdb.RegisterTypes, the baseline both
	// other forms are measured against.
	fs := append(forms(b, 1), newForm(b, "before", false, false, 1))
	req := orderOf("ada@example.com", 2)
	for _, f := range fs { // prepare every statement on each form's connection
		for i := range 20 {
			if _, err := f.svc.PlaceOrder(ctx, fmt.Sprintf("warm-%d", i), req); err != nil {
				b.Fatal(err)
			}
		}
	}
	took := make([][]time.Duration, len(fs))
	cpu := make([]time.Duration, len(fs))
	backends, pgCPU := make([]int, len(fs)), make([]time.Duration, len(fs))
	for k, f := range fs {
		backends[k] = testenv.Count(b, f.db, "SELECT pg_backend_pid()") // the pool's one connection
		pgCPU[k] = backendCPU(backends[k])
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range fs {
			k := (i + j) % len(fs) // each form goes first in turn
			f := fs[k]
			c0, t0 := cpuTime(), time.Now()
			if _, err := f.svc.PlaceOrder(ctx, fmt.Sprintf("order-%d", i), req); err != nil {
				b.Fatal(err)
			}
			took[k] = append(took[k], time.Since(t0))
			cpu[k] += cpuTime() - c0
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(fs))
	for k, f := range fs {
		pgCPU[k] = backendCPU(backends[k]) - pgCPU[k]
		p50[k] = median(took[k])
		var sum time.Duration
		for _, d := range took[k] {
			sum += d
		}
		b.ReportMetric(float64(p50[k].Microseconds()), f.name+"-p50-µs")
		b.ReportMetric(float64(len(took[k]))/sum.Seconds(), f.name+"-orders/s")
		b.ReportMetric(float64(cpu[k].Microseconds())/float64(len(took[k])), f.name+"-cpu-µs/order")
		if backends[k] > 0 && pgCPU[k] >= 0 {
			b.ReportMetric(float64(pgCPU[k].Microseconds())/float64(len(took[k])), f.name+"-pg-cpu-µs/order")
		}
	}
	for k := 1; k < len(fs); k++ {
		b.ReportMetric(float64(p50[0])/float64(p50[k]), "p50-fast/"+fs[k].name)
		b.ReportMetric(float64(cpu[0])/float64(cpu[k]), "cpu-fast/"+fs[k].name)
		if pgCPU[0] > 0 && pgCPU[k] > 0 {
			b.ReportMetric(float64(pgCPU[0])/float64(pgCPU[k]), "pg-cpu-fast/"+fs[k].name)
		}
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// cpuTime is the CPU time, user and system, this process has spent so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time, user and system, of the Postgres backend pid so far, read
// from /proc in clock ticks of 10 ms; -1 when Postgres is not on this machine.
func backendCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command's closing parenthesis; utime and stime are the 12th
	// and 13th of them (fields 14 and 15 of proc(5)).
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
