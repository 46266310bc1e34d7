// Package service is the start-up every service's main runs, in one order: read the
// environment (or print --help, or run an operator's dlq/outbox command and exit), arm
// the failpoints, set up telemetry, open and migrate the database before anything
// listens, open the broker connections, then run the relay, the consumers, the loops and
// the HTTP server together until one fails or the process is asked to stop.
//
// A main declares its own variables, migrations, handlers and routes on a Start, step
// by step, and calls Wait last. The Start closes what it opened, in reverse order, when
// the main's deferred Close runs.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/consumer"
	"github.com/bookstore-go/bookstore/services/platform/failpoint"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// RunFunc is a service's run function: what main runs with the process's arguments,
// environment and stdout, and what a test runs in-process with its own.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// Main runs run until SIGINT or SIGTERM and exits 1, with "name: error" on stderr, when
// it fails.
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Spec is what a service is, as far as its start-up needs to know.
type Spec struct {
	Name       string   // the command's name; the default database and role; telemetry's service name
	Port       int      // HTTP_ADDR's default port
	Postgres   bool     // it reads DATABASE_URL, DATABASE_ADMIN_URL and DATABASE_MAX_CONNS
	RabbitMQ   bool     // it reads AMQP_URL
	Failpoints []string // the system's failpoint names; nil: no BOOKSTORE_FAILPOINTS
	Commands   Commands // the operator commands it runs instead of starting; nil: none
}

// Commands are operator commands a service binary runs instead of starting: the
// operator's dlq and outbox commands (package ops, a module of its own) or none.
type Commands interface {
	// Handles reports whether arg, the first positional argument, names one of them.
	Handles(arg string) bool
	// Run runs the command in args against the service's database and broker.
	Run(ctx context.Context, cfg *config.Common, args []string, stdout io.Writer) error
}

// Start is one service's start-up in progress. Make one with New, defer its Close.
type Start struct {
	// Config holds the standard variables once Parse has read them.
	Config *config.Common
	// Log is the service's logger once Begin has set it up.
	Log *slog.Logger

	spec     Spec
	standard []config.Var
	vars     []config.Var
	relay    *outbox.EnvSettings
	retry    *consumer.Retry
	command  string
	stdout   io.Writer

	tel     *telemetry.Telemetry
	pool    *pgxpool.Pool
	brokers int
	checks  []httpapi.Check
	tasks   []func(context.Context) error
	cleanup bool
	stops   []func()
}

// New starts the start-up of the service spec describes.
func New(spec Spec) *Start {
	cfg, standard := config.Standard(spec.Name, spec.Port)
	s := &Start{Config: cfg, spec: spec}
	for _, v := range standard {
		switch v.Name {
		case "DATABASE_URL", "DATABASE_ADMIN_URL", "DATABASE_MAX_CONNS":
			if !spec.Postgres {
				continue
			}
		case "AMQP_URL":
			if !spec.RabbitMQ {
				continue
			}
		case "BOOKSTORE_FAILPOINTS":
			if spec.Failpoints == nil {
				continue
			}
		}
		s.standard = append(s.standard, v)
	}
	return s
}

// Vars declares the service's own variables. --help lists them in the order declared,
// after the standard ones.
func (s *Start) Vars(vars ...config.Var) { s.vars = append(s.vars, vars...) }

// RelayVariables declares the outbox relay's variables (RELAY_*), which Relay reads.
func (s *Start) RelayVariables() *outbox.EnvSettings {
	settings, vars := outbox.EnvVariables()
	s.relay = settings
	s.Vars(vars...)
	return settings
}

// RetryVariables declares a consumer's retry pacing (CONSUMER_RETRY_*), with max as the
// longest wait's default, and its message size limit (CONSUMER_MAX_MESSAGE_SIZE);
// Consume reads them.
func (s *Start) RetryVariables(max string) {
	retry, vars := consumer.RetryVariables(max)
	s.retry = retry
	s.Vars(vars...)
}

// Parse reads every declared variable from getenv. done reports that run should return
// err now and start nothing: after --help (err nil), after an operator's dlq or outbox
// command has done its work, or when a variable or flag is wrong.
func (s *Start) Parse(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) (done bool, err error) {
	s.stdout = stdout
	if err := config.Parse(s.spec.Name, args, getenv, stdout, slices.Concat(s.standard, s.vars)); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return true, nil
		}
		return true, err
	}
	if s.spec.RabbitMQ {
		// Here, not at the first dial: a URL that can never work stops the service at
		// start with the variable's name (and not its password).
		if _, err := broker.ParseEndpoints(s.Config.AMQPURL); err != nil {
			return true, fmt.Errorf("%s: AMQP_URL: %w", s.spec.Name, err)
		}
	}
	if _, err := httpapi.ParseHosts(s.Config.HTTPHosts); err != nil {
		return true, fmt.Errorf("%s: HTTP_HOSTS=%q: %w", s.spec.Name, s.Config.HTTPHosts, err)
	}
	if rest := config.Rest(args); len(rest) > 0 {
		if s.spec.Commands != nil && s.spec.Commands.Handles(rest[0]) {
			return true, s.spec.Commands.Run(ctx, s.Config, rest, stdout)
		}
		s.command = rest[0]
	}
	return false, nil
}

// Command is the first positional argument after the flags, such as the "relay" of
// "ordering relay"; empty when there is none. Which ones it takes is the service's to say.
func (s *Start) Command() string { return s.command }

// Begin arms the failpoints and sets up telemetry, once the service has checked its own
// variables; logAttrs are added to every line the service's Log writes.
func (s *Start) Begin(ctx context.Context, logAttrs ...any) (*telemetry.Telemetry, error) {
	if s.spec.Failpoints != nil {
		if err := failpoint.Configure(s.Config.Failpoints, s.spec.Failpoints); err != nil {
			return nil, err
		}
	}
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: s.spec.Name, LogLevel: s.Config.LogLevel, OTLPEndpoint: s.Config.OTLPEndpoint, Stdout: s.stdout,
		TrustIncoming: s.Config.TrustTrace == "1"})
	if err != nil {
		return nil, err
	}
	s.onClose(func() { _ = tel.Shutdown(context.WithoutCancel(ctx)) })
	s.tel, s.Log = tel, tel.Logger.With(logAttrs...)
	return tel, nil
}

// Database opens the service's database and applies sets, before anything listens: no
// request or event meets an old schema. /readyz checks it as "postgres".
func (s *Start) Database(ctx context.Context, sets ...pgdb.Migrations) (*pgxpool.Pool, error) {
	pool, err := pgdb.Open(ctx, s.Config.DatabaseAdminURL, s.Config.PoolURL(), sets...)
	if err != nil {
		return nil, err
	}
	s.onClose(pool.Close)
	s.pool = pool
	s.checks = append(s.checks, httpapi.Check{Name: "postgres", Ping: pool.Ping})
	return pool, nil
}

// BrokerConn opens a RabbitMQ connection named "<service>-<purpose>", one per purpose:
// publishing and consuming on connections of their own, so a broker that blocks the
// publisher (a memory or disk alarm) does not stop the consumer's acks. The first one
// opened is the one /readyz checks as "rabbitmq".
func (s *Start) BrokerConn(purpose string) *broker.Conn {
	conn := broker.NewConn(s.Config.AMQPURL, s.spec.Name+"-"+purpose)
	s.onClose(func() { _ = conn.Close() })
	if s.brokers++; s.brokers == 1 {
		s.checks = append(s.checks, httpapi.Check{Name: "rabbitmq", Ping: conn.Ping})
	}
	return conn
}

// Publisher is the relay's publisher on conn to t, the system's whole topology, as the
// RELAY_* variables configure it.
func (s *Start) Publisher(conn *broker.Conn, t broker.Topology) *broker.Publisher {
	pub := s.relaySettings().Publisher(conn, t)
	s.onClose(pub.Close)
	return pub
}

// Relay is the outbox relay of the service's events on pool, publishing through pub and
// passing the failpoint afterPublish between a batch's publish and its record. It does not
// run until the service hands its Run to Go.
func (s *Start) Relay(pool *pgxpool.Pool, pub *broker.Publisher, afterPublish string) (*outbox.Relay, error) {
	cfg := s.relaySettings().Config(s.spec.Name)
	cfg.AfterPublishFailpoint = afterPublish
	return outbox.NewRelay(pool, pub, s.tel, cfg)
}

func (s *Start) relaySettings() *outbox.EnvSettings {
	if s.relay == nil {
		panic("service: a relay without RelayVariables") // a main that forgot a line
	}
	return s.relay
}

// Consume consumes cfg.Queue on conn with handle from Wait on, with the retry pacing of
// RetryVariables and its CONSUMER_PRODUCER, when set, as cfg.Producer; it pauses while the database is down (an outage spends no delivery),
// exports the depth of the queue's DLQ, is checked by /readyz as "consumer", and runs the
// inbox's clean-up beside it.
func (s *Start) Consume(conn *broker.Conn, cfg consumer.Config, handle consumer.Handler) error {
	if s.retry == nil {
		panic("service: a consumer without RetryVariables") // a main that forgot a line
	}
	cfg.RetryBase, cfg.RetryMax = s.retry.Base, s.retry.Max
	cfg.MaxMessageSize = s.retry.MaxMessageSize
	if s.retry.Producer != "" {
		cfg.Producer = s.retry.Producer
	}
	cfg.Healthy = s.pool.Ping
	c, err := consumer.New(conn, s.tel, cfg, handle)
	if err != nil {
		return err
	}
	if err := consumer.ObserveDeadLetters(s.tel, conn, cfg.Queue); err != nil {
		return err
	}
	s.Go(c.Run, httpapi.Check{Name: "consumer", Ping: c.Ready})
	if !s.cleanup {
		s.cleanup = true
		s.Loop(func(ctx context.Context) { inbox.RunCleanup(ctx, s.pool, inbox.Retention, time.Hour, s.Log) })
	}
	return nil
}

// Go runs task from Wait on, beside the others, until ctx ends; a task that fails stops
// them all. checks join /readyz.
func (s *Start) Go(task func(ctx context.Context) error, checks ...httpapi.Check) {
	s.tasks = append(s.tasks, task)
	s.checks = append(s.checks, checks...)
}

// Loop runs loop from Wait on, beside the others, until ctx ends; a loop has no failure
// of its own to stop the service with.
func (s *Start) Loop(loop func(ctx context.Context)) {
	s.Go(func(ctx context.Context) error { loop(ctx); return nil })
}

// Checks are what /readyz checks, in the order added: the database, the broker, then
// the relay and consumers the service runs.
func (s *Start) Checks() []httpapi.Check { return slices.Clone(s.checks) }

// Serve serves h on HTTP_ADDR, to the names of HTTP_HOSTS, from Wait on.
func (s *Start) Serve(h http.Handler) {
	addr := s.Config.HTTPAddr
	hosts, _ := httpapi.ParseHosts(s.Config.HTTPHosts) // Parse refused a bad list
	s.Go(func(ctx context.Context) error { return httpapi.Serve(ctx, addr, hosts, h, s.Log, nil) })
}

// Wait runs the profiles (PPROF_ADDR) and every task together until one fails or ctx
// ends, and returns the first failure.
func (s *Start) Wait(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpapi.ServeProfiles(ctx, s.Config.PprofAddr, s.Log) })
	for _, task := range s.tasks {
		g.Go(func() error { return task(ctx) })
	}
	return g.Wait()
}

// Close closes what the start-up opened, the last first: connections and the database,
// then telemetry, whose spans are flushed last.
func (s *Start) Close() {
	for _, stop := range slices.Backward(s.stops) {
		stop()
	}
	s.stops = nil
}

func (s *Start) onClose(stop func()) { s.stops = append(s.stops, stop) }
