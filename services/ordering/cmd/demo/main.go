// Command demo runs the producer-side experiments (`make demo`) against the real Postgres
// and RabbitMQ, in a sandbox of its own that is dropped afterwards, and prints one
// measured line per experiment. docs/outbox.md explains each line.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bookstore-go/bookstore/services/ordering/internal/experiments"
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
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	servers := experiments.Servers{
		DatabaseAdminURL: or("DATABASE_ADMIN_URL", "postgres://postgres@localhost:5432/postgres?sslmode=disable"),
		AMQPURL:          or("AMQP_URL", "amqp://guest:guest@localhost:5672/"),
		ManagementURL:    or("RABBITMQ_MANAGEMENT_URL", "http://guest:guest@localhost:15672"),
	}
	// The relay logs a warning for the stop the last experiment makes on purpose; the
	// demo's output is its measurements alone.
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "ordering-demo", LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()

	lab, closeLab, err := experiments.NewSandbox(ctx, servers, tel)
	if err != nil {
		return err
	}
	defer closeLab()
	return lab.RunAll(ctx, stdout)
}
