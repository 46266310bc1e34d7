// Command demo runs the producer-side experiments (`make demo`) against the real Postgres
// and RabbitMQ, in a sandbox of its own that is dropped afterwards, and prints one
// measured line per experiment. docs/outbox.md explains each line.
package main

import (
	"context"
	"io"

	"github.com/bookstore-go/bookstore/services/ordering/internal/experiments"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

func main() {
	sandbox.Main("ordering-demo", func(ctx context.Context, servers sandbox.Servers, tel *telemetry.Telemetry, stdout io.Writer) error {
		lab, closeLab, err := experiments.NewSandbox(ctx, servers, tel)
		if err != nil {
			return err
		}
		defer closeLab()
		return lab.RunAll(ctx, stdout)
	})
}
