// Package config reads a service's configuration from environment variables, with
// defaults that work on a machine with Postgres and RabbitMQ on their standard local
// ports, and prints them all for --help. One table of variables is the whole
// configuration surface, so the README, docker compose and --help cannot disagree.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrHelp is returned by Parse after printing the help text for -h or --help.
var ErrHelp = errors.New("help requested")

// Var is one environment variable: its name, default and meaning, and how its value is
// parsed into the variable it is bound to. Make one with String, OneOf, Bool, Int or
// Duration.
type Var struct {
	Name    string
	Default string
	Help    string
	set     func(string) error
}

// String binds a text variable.
func String(name, def, help string, dest *string) Var {
	return Var{name, def, help, func(s string) error { *dest = s; return nil }}
}

// OneOf binds a text variable that must be one of choices.
func OneOf(name, def, help string, choices []string, dest *string) Var {
	return Var{name, def, help, func(s string) error {
		if !slices.Contains(choices, s) {
			return fmt.Errorf("want one of %s", strings.Join(choices, ", "))
		}
		*dest = s
		return nil
	}}
}

// Bool binds a switch, written 1 (on) or 0 (off); any other value is refused.
func Bool(name, def, help string, dest *bool) Var {
	return Var{name, def, help, func(s string) error {
		switch s {
		case "0", "1":
			*dest = s == "1"
			return nil
		}
		return errors.New("want 0 or 1")
	}}
}

// Int binds a positive integer variable.
func Int(name, def, help string, dest *int) Var {
	return Var{name, def, help, func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return errors.New("want a positive integer")
		}
		*dest = n
		return nil
	}}
}

// Duration binds a positive duration variable such as "30s".
func Duration(name, def, help string, dest *time.Duration) Var {
	return Var{name, def, help, func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return errors.New("want a positive duration such as 30s")
		}
		*dest = d
		return nil
	}}
}

// Common is what every service reads.
type Common struct {
	DatabaseURL      string
	DatabaseAdminURL string
	AMQPURL          string
	HTTPAddr         string
	HTTPHosts        string
	OTLPEndpoint     string
	TrustTrace       string
	LogLevel         string
	Failpoints       string
	PprofAddr        string
	DatabaseMaxConns int
}

// PoolURL is DatabaseURL with the pool size of DATABASE_MAX_CONNS, unless the URL sets
// pool_max_conns itself. The URL is otherwise kept as given, byte for byte: a multi-host
// URL (postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write), which net/url
// cannot always take apart (an IPv6 host among several), keeps every host, and a
// keyword/value string (host=h1,h2 dbname=db) is extended in its own syntax.
func (c *Common) PoolURL() string {
	s, size := c.DatabaseURL, strconv.Itoa(c.DatabaseMaxConns)
	if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		if s == "" || slices.ContainsFunc(strings.Fields(s), func(f string) bool { return strings.HasPrefix(f, "pool_max_conns=") }) {
			return s
		}
		return s + " pool_max_conns=" + size
	}
	_, query, hasQuery := strings.Cut(s, "?")
	if !hasQuery {
		return s + "?pool_max_conns=" + size
	}
	if q, err := url.ParseQuery(query); err != nil || q.Has("pool_max_conns") {
		return s // a malformed query fails, with its own message, where it is used
	}
	if query == "" {
		return s + "pool_max_conns=" + size
	}
	return s + "&pool_max_conns=" + size
}

// Standard returns the variables every service reads, bound to a Common, with defaults
// for service (its own role and database) on port.
func Standard(service string, port int) (*Common, []Var) {
	c := &Common{}
	return c, []Var{
		String("DATABASE_URL", "postgres://"+service+"@localhost:5432/"+service+"?sslmode=disable", "the service's own database and role; created if missing when DATABASE_ADMIN_URL is set. A primary and its standbys may be listed, e.g. postgres://u@pg-a:5432,pg-b:5432/db?target_session_attrs=read-write; connect_timeout defaults to 5 (seconds, per host)", &c.DatabaseURL),
		// Least privilege by default: no superuser connection unless one is given (make run,
		// docker compose and the tests give one).
		String("DATABASE_ADMIN_URL", "", "superuser connection that creates the role and database at start, e.g. postgres://postgres@localhost:5432/postgres?sslmode=disable; empty: assume they exist, never connect as a superuser", &c.DatabaseAdminURL),
		// pgxpool's own default, one connection per core and at least four, queued a busy
		// API's requests in the pool while Postgres waited on fsync with cores to spare.
		Int("DATABASE_MAX_CONNS", "12", "connections in the service's database pool", &c.DatabaseMaxConns),
		String("AMQP_URL", "amqp://guest:guest@localhost:5672/", "RabbitMQ; a cluster's nodes may be listed, tried in turn: amqp://user:pass@node1:5672,node2:5672/vhost (?load_balance_hosts=random shuffles them)", &c.AMQPURL),
		// Loopback unless asked: in a container compose sets :<port>, as a published port
		// reaches the container's own interface, not its loopback.
		String("HTTP_ADDR", "127.0.0.1:"+strconv.Itoa(port), "HTTP listen address; :"+strconv.Itoa(port)+" listens on every interface", &c.HTTPAddr),
		// DNS rebinding: a page on another origin whose name resolves to loopback gets
		// 421 (httpapi.Hosts). Compose adds the service names, k8s its Service's.
		String("HTTP_HOSTS", "", "names the HTTP server answers to (Host header, any port), comma-separated, beside localhost, loopback addresses and the address a request arrived on, which it always answers; any other name is a 421", &c.HTTPHosts),
		String("OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/HTTP endpoint for traces (e.g. http://localhost:4318); empty: traces stay in the process", &c.OTLPEndpoint),
		// A client's traceparent as the parent would let it choose the trace an order
		// is part of, and store its tracestate in the outbox.
		OneOf("OTEL_TRUST_INCOMING", "0", "1: an incoming traceparent is the request span's parent (callers are the system's own); 0: a link to a new trace", []string{"0", "1"}, &c.TrustTrace),
		String("LOG_LEVEL", "info", "debug, info, warn or error", &c.LogLevel),
		String("BOOKSTORE_FAILPOINTS", "", `failpoints, e.g. "relay/after-publish=p(0.05)*crash"`, &c.Failpoints),
		String("PPROF_ADDR", "", "serve net/http/pprof on this address, e.g. 127.0.0.1:6061; empty: off", &c.PprofAddr),
	}
}

// Parse fills every Var from getenv, or its default when unset. With -h or --help in args
// it prints the table to stdout and returns ErrHelp.
func Parse(service string, args []string, getenv func(string) string, stdout io.Writer, vars []Var) error {
	fs := flag.NewFlagSet(service, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(service, stdout, vars)
			return ErrHelp
		}
		return fmt.Errorf("%s: %w", service, err)
	}
	// Every variable is parsed before any is used, so a bad value stops the service at
	// start with the variable's name, not later in the middle of its work.
	var errs []error
	for _, v := range vars {
		value := v.Default
		if s := getenv(v.Name); s != "" {
			value = s
		}
		if err := v.set(value); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", v.Name, value, err))
		}
	}
	return errors.Join(errs...)
}

func printHelp(service string, w io.Writer, vars []Var) {
	fmt.Fprintf(w, "%s: configured by environment variables\n\n", service)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	for _, v := range vars {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, v.Default, v.Help)
	}
	_ = tw.Flush()
}

// Rest returns the positional arguments after flags, e.g. the "relay" of "ordering relay".
func Rest(args []string) []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_ = fs.Parse(args)
	return fs.Args()
}
