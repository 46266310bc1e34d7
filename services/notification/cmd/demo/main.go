// Command demo runs notification's experiment (`make demo`, the [email] line) against the
// real Postgres, in a database of its own that is dropped afterwards, with an email
// provider in-process, and prints the measured line. docs/exactly-once-email.md explains
// it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bookstore-go/bookstore/services/notification/internal/experiments"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	adminURL := getenv("DATABASE_ADMIN_URL")
	if adminURL == "" {
		adminURL = "postgres://postgres@localhost:5432/postgres?sslmode=disable"
	}
	// The crash is on purpose; the demo's output is its measurement alone.
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "notification-demo", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()

	lab, closeLab, err := experiments.NewSandbox(ctx, adminURL, tel)
	if err != nil {
		return err
	}
	defer closeLab()
	return lab.RunAll(ctx, stdout)
}
