// Command emailprovider stands in for a third-party email API with Idempotency-Keys. It
// records every email it sends, answers "did you send key K?", forwards it over SMTP when
// SMTP_ADDR is set, and injects its own faults on request.
//
//	emailprovider          the API on :8084
//	emailprovider --help   every environment variable and its default
package main

import (
	"context"
	"io"
	"time"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/api"
	"github.com/bookstore-go/bookstore/services/emailprovider/internal/emails"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/service"
	schema "github.com/bookstore-go/bookstore/sql"
)

func main() { service.Main("emailprovider", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s := service.New(service.Spec{Name: "emailprovider", Port: 8084, Postgres: true}) // no broker, no failpoints
	defer s.Close()
	var failRate, ambiguousRate, latency, smtpAddr, smtpFrom, apiKeys string
	var admin bool
	var groupCommit int
	s.Vars(
		config.String("EMAILPROVIDER_API_KEYS", "", "the callers: comma-separated account:key pairs (a key: 32 or more printable ASCII characters); required", &apiKeys),
		config.String("EMAILPROVIDER_FAIL_RATE", "0", "share of sends answered 503 without sending (0 to 1)", &failRate),
		config.String("EMAILPROVIDER_AMBIGUOUS_RATE", "0", "share of sends that send, then stall past the caller's timeout (0 to 1)", &ambiguousRate),
		config.String("EMAILPROVIDER_LATENCY", "0s", "added to every request, e.g. 200ms; a send spends it holding its key", &latency),
		config.Int("EMAILPROVIDER_GROUP_COMMIT", "32", "the most sends one transaction commits: sends arriving while another commits share the next; 1: each its own transaction", &groupCommit),
		config.Bool("EMAILPROVIDER_ADMIN", "0", "1: allow PUT /admin/faults to change the faults at run time", &admin),
		config.String("SMTP_ADDR", "", "host:port of an SMTP server (Mailpit) to forward sent emails to; empty: record only", &smtpAddr),
		config.String("SMTP_FROM", "bookstore@example.com", "sender address of forwarded emails", &smtpFrom),
	)
	if done, err := s.Parse(ctx, args, getenv, stdout); done {
		return err // --help or a wrong variable
	}
	initial, err := emails.ParseFaults(failRate, ambiguousRate, latency)
	if err != nil {
		return err
	}
	keys, err := api.ParseAPIKeys(apiKeys)
	if err != nil {
		return err
	}

	tel, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	pool, err := s.Database(ctx, pgdb.Migrations{FS: schema.EmailProvider, VersionTable: "goose_emailprovider_version"})
	if err != nil {
		return err
	}
	var forward emails.Forwarder
	if smtpAddr != "" {
		forward = emails.SMTPForwarder{Addr: smtpAddr, From: smtpFrom, Timeout: 5 * time.Second}
	}
	faults := emails.NewFaults(initial, ctx.Done())
	svc, err := emails.NewService(pool, faults, forward, groupCommit, s.Log, tel.Tracer("emails"), tel.Meter("emailprovider"))
	if err != nil {
		return err
	}
	s.Serve(api.NewServer(svc, faults, admin, keys, tel, s.Checks()...))
	s.Log.InfoContext(ctx, "emailprovider started", "http_addr", s.Config.HTTPAddr, "smtp_addr", smtpAddr,
		"admin", admin, "fail_rate", initial.FailRate, "ambiguous_rate", initial.AmbiguousRate, "latency", initial.Latency, "group_commit", groupCommit)
	return s.Wait(ctx)
}
