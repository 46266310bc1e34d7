// Command chaos runs the whole Bookstore system as real processes on this machine, drives
// an open-model order load at it, injects crashes, failpoints, network faults, provider
// faults, duplicate deliveries and poison messages on a schedule drawn from a seed, waits
// for the system to go quiet and then checks every invariant of the contracts, Jepsen
// style: lost, unexpected, duplicated and stuck effects.
//
//	chaos [flags]           one run of the default design (outbox + inbox); exit 1 on a violation
//	chaos compare [flags]   the same seed and faults against the default and the wrong designs
//	chaos --profile soak    make soak: a long load at half the measured capacity, judged per window
//	chaos report DIR        render DIR/report.json again as report.html and the CSV files
//	chaos figures [-check]  render the figures the docs quote from docs/reports/ (make chaos-figures)
//	chaos figures save OUT DIR...  commit runs' reports: DIR/report.json of each, as OUT
//	chaos --help            every flag
//
// It closes the gap between "the design survives crashes" and "we watched it survive
// them": every failure window the services claim to close is opened here, many times, and
// the naive designs run under the same faults show what the windows cost when left open.
//
// The packages under internal/ import only downward: experiment runs a run through
// report, faults and load, which use harness (the processes and their links), which uses
// config; check, the checker and the snapshot it reads, imports none of the others.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/check"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/experiment"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/figures"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/report"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, experiment.ErrViolations), errors.Is(err, figures.ErrStale):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 2 && args[0] == "report" {
		return report.Rerender(args[1])
	}
	if len(args) > 0 && args[0] == "figures" {
		return runFigures(args[1:], stdout)
	}
	compare := len(args) > 0 && args[0] == "compare"
	if compare {
		args = args[1:]
	}
	cfg, err := config.Parse(args, stderr, compare)
	if err != nil {
		return err
	}
	if compare {
		return experiment.Compare(ctx, cfg, stdout, stderr)
	}
	if cfg.Soak.On {
		return experiment.Soak(ctx, cfg, stdout, stderr)
	}
	res, err := experiment.Run(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	report.PrintSummary(stdout, res)
	if !check.Passed(res.Verdicts) {
		return figures.ErrStale
	}
	return nil
}

// runFigures renders the generated blocks of the docs from the committed reports, checks
// them (-check: exit 1 naming each block that differs), or saves runs as a committed
// report (save OUT DIR...).
func runFigures(args []string, stdout io.Writer) error {
	if len(args) >= 3 && args[0] == "save" {
		return figures.Save(args[1], args[2:])
	}
	checkOnly := len(args) == 1 && args[0] == "-check"
	if len(args) > 0 && !checkOnly {
		return fmt.Errorf("usage: chaos figures [-check] | chaos figures save OUT DIR...")
	}
	changed, err := figures.Update(".", checkOnly)
	if err != nil {
		return err
	}
	for _, c := range changed {
		if checkOnly {
			fmt.Fprintf(stdout, "%s: generated block differs from its report: run make chaos-figures\n", c)
		} else {
			fmt.Fprintf(stdout, "%s: rendered again\n", c)
		}
	}
	if checkOnly && len(changed) > 0 {
		return figures.ErrStale
	}
	return nil
}
