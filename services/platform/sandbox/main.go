package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// Demo is what one `make demo` command does once its servers and telemetry are set up:
// make its sandbox, run its experiments and print one measured line each to stdout.
type Demo func(ctx context.Context, servers Servers, tel *telemetry.Telemetry, stdout io.Writer) error

// Main is the whole of a demo command's main: it runs demo on the servers the
// environment names (ServersFrom), with telemetry that prints nothing, since the
// experiments crash and poison on purpose and a demo's output is its measurements alone;
// it exits 1 with the error, or on SIGINT or SIGTERM.
func Main(service string, demo Demo) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, service, demo)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, service+":", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, service string, demo Demo) error {
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: service, LogLevel: "error", Stdout: io.Discard})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	return demo(ctx, ServersFrom(os.Getenv), tel, os.Stdout)
}

// ServersFrom reads the servers from DATABASE_ADMIN_URL, AMQP_URL and
// RABBITMQ_MANAGEMENT_URL, each defaulting to this machine's servers as `make services`
// starts them (`make demo SERVERS=compose` sets all three for compose's).
func ServersFrom(getenv func(string) string) Servers {
	or := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	return Servers{
		DatabaseAdminURL: or("DATABASE_ADMIN_URL", "postgres://postgres@localhost:5432/postgres?sslmode=disable"),
		AMQPURL:          or("AMQP_URL", "amqp://guest:guest@localhost:5672/"),
		ManagementURL:    or("RABBITMQ_MANAGEMENT_URL", "http://guest:guest@localhost:15672"),
	}
}
