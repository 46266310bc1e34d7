// Command emailprovider stands in for a third-party email API with Idempotency-Keys. It
// records every email it sends, answers "did you send key K?", relays to SMTP when
// SMTP_ADDR is set, and injects its own faults on request.
//
//	emailprovider          the API on :8084
//	emailprovider --help   every environment variable and its default
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/api"
	"github.com/bookstore-go/bookstore/services/emailprovider/internal/emails"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
	schema "github.com/bookstore-go/bookstore/sql"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "emailprovider:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, standard := config.Standard("emailprovider", 8084)
	var vars []config.Var
	for _, v := range standard {
		if v.Name != "AMQP_URL" && v.Name != "BOOKSTORE_FAILPOINTS" { // no broker, no failpoints here
			vars = append(vars, v)
		}
	}
	var failRate, ambiguousRate, latency, admin, smtpAddr, smtpFrom string
	vars = append(vars,
		config.String("EMAILPROVIDER_FAIL_RATE", "0", "share of sends answered 503 without sending (0 to 1)", &failRate),
		config.String("EMAILPROVIDER_AMBIGUOUS_RATE", "0", "share of sends that send, then stall past the caller's timeout (0 to 1)", &ambiguousRate),
		config.String("EMAILPROVIDER_LATENCY", "0s", "added to every request, e.g. 200ms; a send spends it holding its key", &latency),
		config.String("EMAILPROVIDER_ADMIN", "0", "1: allow PUT /admin/faults to change the faults at run time", &admin),
		config.String("SMTP_ADDR", "", "host:port of an SMTP server (Mailpit) to relay sent emails to; empty: record only", &smtpAddr),
		config.String("SMTP_FROM", "bookstore@example.com", "sender address of relayed emails", &smtpFrom),
	)
	if err := config.Parse("emailprovider", args, getenv, stdout, vars); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return nil
		}
		return err
	}
	initial, err := emails.ParseFaults(failRate, ambiguousRate, latency)
	if err != nil {
		return err
	}
	if admin != "0" && admin != "1" {
		return fmt.Errorf("EMAILPROVIDER_ADMIN=%q: want 0 or 1", admin)
	}

	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "emailprovider", LogLevel: cfg.LogLevel, OTLPEndpoint: cfg.OTLPEndpoint, Stdout: stdout})
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) }()
	log := tel.Logger

	pool, err := pgdb.Open(ctx, cfg.DatabaseAdminURL, cfg.PoolURL(),
		pgdb.Migrations{FS: schema.EmailProvider, VersionTable: "goose_emailprovider_version"})
	if err != nil {
		return err
	}
	defer pool.Close()

	var relay emails.Relay
	if smtpAddr != "" {
		relay = emails.SMTPRelay{Addr: smtpAddr, From: smtpFrom, Timeout: 5 * time.Second}
	}
	faults := emails.NewFaults(initial, ctx.Done())
	svc, err := emails.NewService(pool, faults, relay, log, tel.Tracer("emails"), tel.Meter("emailprovider"))
	if err != nil {
		return err
	}
	handler := api.NewServer(svc, faults, admin == "1", tel, httpapi.Check{Name: "postgres", Ping: pool.Ping})
	log.InfoContext(ctx, "emailprovider started", "http_addr", cfg.HTTPAddr, "smtp_addr", smtpAddr,
		"admin", admin == "1", "fail_rate", initial.FailRate, "ambiguous_rate", initial.AmbiguousRate, "latency", initial.Latency)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpapi.ServeProfiles(ctx, cfg.PprofAddr, log) })
	g.Go(func() error { return httpapi.Serve(ctx, cfg.HTTPAddr, handler, log, nil) })
	return g.Wait()
}
