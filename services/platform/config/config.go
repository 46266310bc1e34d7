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
	"strconv"
	"text/tabwriter"
	"time"
)

// ErrHelp is returned by Parse after printing the help text for -h or --help.
var ErrHelp = errors.New("help requested")

// Var is one environment variable.
type Var struct {
	Name    string
	Default string
	Help    string
	Dest    *string
}

// Common is what every service reads.
type Common struct {
	DatabaseURL      string
	DatabaseAdminURL string
	AMQPURL          string
	HTTPAddr         string
	OTLPEndpoint     string
	LogLevel         string
	Failpoints       string
}

// Standard returns the variables every service reads, bound to a Common, with defaults
// for service (its own role and database) on port.
func Standard(service string, port int) (*Common, []Var) {
	c := &Common{}
	return c, []Var{
		{"DATABASE_URL", "postgres://" + service + "@localhost:5432/" + service + "?sslmode=disable", "the service's own database and role; created if missing", &c.DatabaseURL},
		{"DATABASE_ADMIN_URL", "postgres://postgres@localhost:5432/postgres?sslmode=disable", "superuser connection that creates the role and database; empty: assume they exist", &c.DatabaseAdminURL},
		{"AMQP_URL", "amqp://guest:guest@localhost:5672/", "RabbitMQ", &c.AMQPURL},
		{"HTTP_ADDR", ":" + strconv.Itoa(port), "HTTP listen address", &c.HTTPAddr},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/HTTP endpoint for traces (e.g. http://localhost:4318); empty: traces stay in the process", &c.OTLPEndpoint},
		{"LOG_LEVEL", "info", "debug, info, warn or error", &c.LogLevel},
		{"BOOKSTORE_FAILPOINTS", "", `failpoints, e.g. "relay/after-publish=p(0.05)*crash"`, &c.Failpoints},
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
	for _, v := range vars {
		*v.Dest = v.Default
		if s := getenv(v.Name); s != "" {
			*v.Dest = s
		}
	}
	return nil
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

// Positive parses a positive integer variable.
func Positive(name, value string) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", name, value)
	}
	return n, nil
}

// PositiveDuration parses a positive duration variable such as "30s".
func PositiveDuration(name, value string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 30s", name, value)
	}
	return d, nil
}
