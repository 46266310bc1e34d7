// Command demo runs notification's experiment (`make demo`, the [email] line) against the
// real Postgres, in a database of its own that is dropped afterwards, with an email
// provider in-process, and prints the measured line. docs/exactly-once-email.md explains
// it.
package main

import (
	"context"
	"io"

	"github.com/bookstore-go/bookstore/services/notification/internal/experiments"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

func main() {
	sandbox.Main("notification-demo", func(ctx context.Context, servers sandbox.Servers, tel *telemetry.Telemetry, stdout io.Writer) error {
		lab, closeLab, err := experiments.NewSandbox(ctx, servers.DatabaseAdminURL, tel)
		if err != nil {
			return err
		}
		defer closeLab()
		return lab.RunAll(ctx, stdout)
	})
}
