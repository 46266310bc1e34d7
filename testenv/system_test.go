package testenv_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/testenv"
)

// fatalRecorder is a testing.TB whose Fatal ends only the goroutine of the call under test
// and records the message, so a test can see another test's helper fail it.
type fatalRecorder struct {
	testing.TB
	fatal    string
	cleanups []func()
}

func (r *fatalRecorder) Helper()               {}
func (r *fatalRecorder) Cleanup(f func())      { r.cleanups = append(r.cleanups, f) }
func (r *fatalRecorder) Errorf(string, ...any) {}
func (r *fatalRecorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

// failure runs call with a recorder and returns what it failed the test with, "" if nothing.
func failure(call func(t testing.TB)) string {
	r := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r.fatal
}

func TestStartingAServiceWithoutContractsFailsTheTest(t *testing.T) {
	t.Parallel()
	idle := func(ctx context.Context, _ []string, _ func(string) string, _ io.Writer) error {
		<-ctx.Done()
		return nil
	}
	got := failure(func(t testing.TB) {
		testenv.System{Topology: testenv.ExampleTopology}.StartInProcess(t, idle, nil)
	})
	if !strings.Contains(got, "no Contracts") {
		t.Errorf("StartInProcess without contracts failed with %q, want the missing contracts named", got)
	}
}
