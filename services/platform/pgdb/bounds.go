package pgdb

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The bounds every connection of a service gets, on both of its ends. Without them a link
// that a NAT or a load balancer dropped while idle, or a client that hung, is found dead
// only by the operating system's defaults: two hours and eleven minutes of TCP keepalive
// on the server, during which a session of ours keeps its transaction open and its row
// and advisory locks held, and every other session waits behind them.
const (
	// IdleInTransactionTimeout is how long the server keeps a session of ours that sits
	// in an open transaction with nothing to do (idle_in_transaction_session_timeout):
	// then it ends the session, rolls the transaction back and frees its locks. The
	// services' transactions wait on nothing but their own statements, for milliseconds;
	// one idle this long belongs to a client that is gone or stuck.
	IdleInTransactionTimeout = 30 * time.Second
	// KeepAliveIdle, KeepAliveInterval and KeepAliveCount are TCP keepalive on both ends
	// (the client's socket and the server's tcp_keepalives_*): an idle link that no
	// longer answers is found dead after about 25 s.
	KeepAliveIdle     = 10 * time.Second
	KeepAliveInterval = 5 * time.Second
	KeepAliveCount    = 3
	// UserTimeout is how long data sent may stay unacknowledged before the connection is
	// given up (TCP_USER_TIMEOUT on the client's socket, tcp_user_timeout on the
	// server's): a link that drops packets under a statement is found dead in this time,
	// where keepalive, which only probes an idle link, never looks.
	UserTimeout = 30 * time.Second
	// StatementTimeout is how long the server lets one statement of ours run
	// (statement_timeout) before it cancels it (57014, TimedOut) and rolls its
	// transaction back. The services' statements take milliseconds: an indexed claim, a
	// mark, a retention batch of a few hundred rows; the longest wait on a row or
	// advisory lock of another transaction of ours, itself milliseconds long. 5 s is
	// three orders of magnitude over them, longer than the chaos load's attempt (3 s)
	// and well under the HTTP write timeout and a consumer's handler timeout (30 s each):
	// a request stuck behind a lock is answered 503 by ordering before either cuts it.
	// Migrations run without it (Migrate).
	StatementTimeout = 5 * time.Second
)

// RoleSettings are the bounds set on each service's role on the server (ALTER ROLE ...
// SET, by Ensure and by the deployments' init scripts), as the role's configuration
// stores them: every session of the role starts with them, so one whose client sets
// nothing (psql, a one-off tool) is bounded too. A client's own runtime parameter
// overrides them, as pgdb's do with the same values and Migrate's with none.
var RoleSettings = map[string]string{
	"idle_in_transaction_session_timeout": pgInterval(IdleInTransactionTimeout),
	"statement_timeout":                   pgInterval(StatementTimeout),
}

// pgInterval writes d as a Postgres time setting: whole seconds as "30s", else "250ms".
func pgInterval(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// boundConnect sets, on cfg parsed from rawURL, ConnectTimeout and the session bounds
// above, each unless rawURL sets it itself (connect_timeout, or the server setting's name
// as a URL parameter). The statement timeout only with statements: the admin connection
// waits for other instances' Ensure on purpose.
func boundConnect(rawURL string, cfg *pgconn.Config, statements bool) {
	if cfg.ConnectTimeout == 0 && !strings.Contains(rawURL, "connect_timeout") {
		cfg.ConnectTimeout = ConnectTimeout
	}
	for name, value := range map[string]string{
		"idle_in_transaction_session_timeout": strconv.FormatInt(IdleInTransactionTimeout.Milliseconds(), 10),
		"tcp_keepalives_idle":                 strconv.Itoa(int(KeepAliveIdle.Seconds())),
		"tcp_keepalives_interval":             strconv.Itoa(int(KeepAliveInterval.Seconds())),
		"tcp_keepalives_count":                strconv.Itoa(KeepAliveCount),
		"tcp_user_timeout":                    strconv.FormatInt(UserTimeout.Milliseconds(), 10),
	} {
		if _, set := cfg.RuntimeParams[name]; !set {
			cfg.RuntimeParams[name] = value
		}
	}
	if _, set := cfg.RuntimeParams["statement_timeout"]; !set && statements {
		cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(StatementTimeout.Milliseconds(), 10)
	}
	d := net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: KeepAliveIdle, Interval: KeepAliveInterval, Count: KeepAliveCount},
		Control:         setUserTimeout,
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
}
