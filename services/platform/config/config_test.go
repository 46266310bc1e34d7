package config

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestParseDefaultsOverridesAndHelp(t *testing.T) {
	c, vars := Standard("ordering", 8081)
	env := map[string]string{"AMQP_URL": "amqp://other/"}
	if err := Parse("ordering", nil, func(k string) string { return env[k] }, nil, vars); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:8081" || c.AMQPURL != "amqp://other/" || !strings.Contains(c.DatabaseURL, "ordering@localhost:5432/ordering") {
		t.Errorf("config = %+v", c)
	}

	var out strings.Builder
	_, vars = Standard("ordering", 8081)
	err := Parse("ordering", []string{"--help"}, func(string) string { return "" }, &out, vars)
	if !errors.Is(err, ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	for _, v := range vars {
		if !strings.Contains(out.String(), v.Name) {
			t.Errorf("--help does not list %s", v.Name)
		}
	}
	if err := Parse("ordering", []string{"--nope"}, func(string) string { return "" }, &out, vars); err == nil || errors.Is(err, ErrHelp) {
		t.Errorf("an unknown flag was accepted: %v", err)
	}
	if rest := Rest([]string{"relay"}); len(rest) != 1 || rest[0] != "relay" {
		t.Errorf("Rest = %v", rest)
	}
}

// Least privilege by default: a service started with nothing set listens on loopback
// only, and never connects as a superuser (DATABASE_ADMIN_URL is empty unless given).
func TestDefaultsListenOnLoopbackAndNeedNoSuperuser(t *testing.T) {
	for _, port := range []int{8081, 8084} {
		c, vars := Standard("svc", port)
		if err := Parse("svc", nil, func(string) string { return "" }, nil, vars); err != nil {
			t.Fatal(err)
		}
		host, _, err := net.SplitHostPort(c.HTTPAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("default HTTP_ADDR = %q, want a loopback address (127.0.0.1:%d)", c.HTTPAddr, port)
		}
		if c.HTTPAddr != "127.0.0.1:"+strconv.Itoa(port) {
			t.Errorf("default HTTP_ADDR = %q, want 127.0.0.1:%d", c.HTTPAddr, port)
		}
		if c.DatabaseAdminURL != "" {
			t.Errorf("default DATABASE_ADMIN_URL = %q, want empty: no superuser unless asked", c.DatabaseAdminURL)
		}
	}
}

func TestNumbersDurationsSwitchesAndChoicesRefuseWhatTheyCannotRead(t *testing.T) {
	parse := func(v Var, value string) error {
		return Parse("svc", nil, func(string) string { return value }, nil, []Var{v})
	}
	var n int
	if err := parse(Int("N", "1", "", &n), "12"); err != nil || n != 12 {
		t.Errorf("Int(12) = %d, %v", n, err)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if err := parse(Int("N", "1", "", &n), bad); err == nil || !strings.Contains(err.Error(), "N=") {
			t.Errorf("Int(%q) = %v, want an error naming N", bad, err)
		}
	}
	var d time.Duration
	if err := parse(Duration("D", "1s", "", &d), "1m30s"); err != nil || d != 90*time.Second {
		t.Errorf("Duration(1m30s) = %v, %v", d, err)
	}
	for _, bad := range []string{"0s", "-1s", "soon", "30"} {
		if err := parse(Duration("D", "1s", "", &d), bad); err == nil || !strings.Contains(err.Error(), "D=") {
			t.Errorf("Duration(%q) = %v, want an error naming D", bad, err)
		}
	}
	var on bool
	for value, want := range map[string]bool{"1": true, "0": false} {
		if err := parse(Bool("B", "0", "", &on), value); err != nil || on != want {
			t.Errorf("Bool(%q) = %v, %v; want %v", value, on, err, want)
		}
	}
	for _, bad := range []string{"true", "yes", "2", " 1"} {
		if err := parse(Bool("B", "0", "", &on), bad); err == nil || !strings.Contains(err.Error(), "B=") || !strings.Contains(err.Error(), "want 0 or 1") {
			t.Errorf("Bool(%q) = %v, want an error naming B and its values", bad, err)
		}
	}
	var s string
	if err := parse(OneOf("O", "a", "", []string{"a", "b"}, &s), "c"); err == nil || !strings.Contains(err.Error(), "O=") || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("OneOf(c) = %v, want an error naming O and its choices", err)
	}
	// Unset, the default applies, and a bad default is reported like a bad value.
	if err := parse(Int("N", "7", "", &n), ""); err != nil || n != 7 {
		t.Errorf("default: %d, %v", n, err)
	}
	if err := parse(Int("N", "x", "", &n), ""); err == nil {
		t.Error("a bad default was accepted")
	}
}

// The pool's URL keeps every host of a multi-host DATABASE_URL (pgx follows a failover
// through them) and its other settings, and adds DATABASE_MAX_CONNS as pool_max_conns
// unless the URL has its own: in URL and in keyword/value form, with IPv6 hosts too.
func TestThePoolURLKeepsEveryHostOfAMultiHostDatabaseURL(t *testing.T) {
	for _, tc := range []struct {
		url      string
		hosts    []string
		maxConns int32
	}{
		{"postgres://ordering@h1:5432,h2:5433/ordering?sslmode=disable&target_session_attrs=read-write", []string{"h1:5432", "h2:5433"}, 7},
		{"postgres://ordering@[::1]:5432,h2:5433/ordering?sslmode=disable", []string{"[::1]:5432", "h2:5433"}, 7},
		{"postgresql://ordering@h1,h2,h3/ordering", []string{"h1:5432", "h2:5432", "h3:5432"}, 7},
		{"postgres://ordering@h1:5432,h2:5433/ordering?sslmode=disable&pool_max_conns=3", []string{"h1:5432", "h2:5433"}, 3},
		{"postgres://ordering@h1:5432/ordering?", []string{"h1:5432"}, 7},
		{"host=h1,h2 port=5432,5433 user=ordering dbname=ordering sslmode=disable", []string{"h1:5432", "h2:5433"}, 7},
		{"host=h1,h2 user=ordering dbname=ordering pool_max_conns=2", []string{"h1:5432", "h2:5432"}, 2},
	} {
		c := Common{DatabaseURL: tc.url, DatabaseMaxConns: 7}
		cfg, err := pgxpool.ParseConfig(c.PoolURL())
		if err != nil {
			t.Errorf("PoolURL() of %q = %q: %v", tc.url, c.PoolURL(), err)
			continue
		}
		hosts := []string{net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))}
		for _, f := range cfg.ConnConfig.Fallbacks {
			hosts = append(hosts, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
		}
		hosts = slices.Compact(hosts) // sslmode=prefer tries each host twice, with TLS and without
		want := make([]string, len(tc.hosts))
		for i, h := range tc.hosts {
			host, port, _ := net.SplitHostPort(h)
			want[i] = net.JoinHostPort(host, port)
		}
		if !slices.Equal(hosts, want) || cfg.MaxConns != tc.maxConns || cfg.ConnConfig.User != "ordering" {
			t.Errorf("PoolURL() of %q = %q: hosts %v, pool_max_conns %d, user %q; want %v, %d, ordering", tc.url, c.PoolURL(), hosts, cfg.MaxConns, cfg.ConnConfig.User, want, tc.maxConns)
		}
	}
}
