// Command chaos runs the whole Bookstore system as real processes on this machine, drives
// an open-model order load at it, injects crashes, failpoints, network faults, provider
// faults, duplicate deliveries and poison messages on a schedule drawn from a seed, waits
// for the system to go quiet and then checks every invariant of the contracts, Jepsen
// style: lost, unexpected, duplicated and stuck effects.
//
//	chaos [flags]           one run of the default design (outbox + inbox); exit 1 on a violation
//	chaos compare [flags]   the same seed and faults against the default and the wrong designs
//	chaos report DIR        render DIR/report.json again as report.html and the plots
//	chaos --help            every flag
//
// It closes the gap between "the design survives crashes" and "we watched it survive
// them": every failure window the services claim to close is opened here, many times, and
// the naive designs run under the same faults show what the windows cost when left open.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, errViolations):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
}

// errViolations is returned when a run finished and the checker found a violation.
var errViolations = errors.New("invariants violated")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 2 && args[0] == "report" {
		return rerender(args[1])
	}
	compare := len(args) > 0 && args[0] == "compare"
	if compare {
		args = args[1:]
	}
	cfg, err := parseFlags(args, stderr, compare)
	if err != nil {
		return err
	}
	if compare {
		return runCompare(ctx, cfg, stdout, stderr)
	}
	res, err := runChaos(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	printSummary(stdout, res)
	if !passed(res.Verdicts) {
		return errViolations
	}
	return nil
}
