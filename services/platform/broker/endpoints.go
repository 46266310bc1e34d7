package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Endpoints is a RabbitMQ URL that names one broker or several nodes of one cluster, in
// the form AMQP_URL takes:
//
//	amqp://user:pass@10.0.0.1:5672,10.0.0.2:5672,rabbit-2:5672/vhost?load_balance_hosts=random
//
// The hosts share one scheme, user information, vhost and query, as the hosts of a
// multi-host Postgres URL do. A dial tries them in the order given and the first that
// answers wins, so a client follows a cluster whose node it was on has died;
// load_balance_hosts=random (the name pgx uses) shuffles the order on every dial, which
// spreads a fleet's connections over the nodes. A URL with one host is that host's URL,
// unchanged: amqp091 parses it, its defaults (localhost, the scheme's port) included.
//
// The user information comes once, before the first host; a host names no user. Every
// host needs a name (only a lone host may be left empty, for localhost) and a port, if
// given, is 1 to 65535.
type Endpoints struct {
	// Hosts are the brokers' host[:port], in the order given.
	Hosts []string
	// Random is load_balance_hosts=random: each dial tries the hosts in a new random order.
	Random bool

	scheme   string // amqp or amqps
	userinfo string // as given, percent-encoding and all; "" without user information
	tail     string // the path, query and fragment as given, load_balance_hosts removed
}

// ParseEndpoints parses a broker URL with one or more hosts. Its errors never contain
// the password.
func ParseEndpoints(rawURL string) (Endpoints, error) {
	var e Endpoints
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != "amqp" && scheme != "amqps") {
		return e, errors.New("want amqp://user:password@host:port[,host:port...]/vhost or amqps://...")
	}
	e.scheme = scheme
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	hosts := authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		e.userinfo, hosts = authority[:i], authority[i+1:]
		// "u:p@h1,u:p@h2" would otherwise read as a password "p@h1,u:p" for h2 alone.
		if at := strings.Index(e.userinfo, "@"); at >= 0 && strings.Contains(e.userinfo[at:], ",") {
			return e, errors.New("user information given more than once: give it once, before the first host (percent-encode an @ in a password as %40)")
		}
	}
	if e.userinfo != "" {
		if _, err := url.Parse("amqp://" + e.userinfo + "@host/"); err != nil {
			// Not err itself: net/url quotes the URL, password and all.
			return e, errors.New(`invalid user information: percent-encode a reserved character ("?", "#", "@", ":", "/", "%") in the user name or password`)
		}
	}
	var err error
	if e.tail, e.Random, err = takeLoadBalancing(tail); err != nil {
		return e, err
	}
	e.Hosts = strings.Split(hosts, ",")
	redacted := e
	redacted.userinfo = redactUserinfo(e.userinfo)
	for i, h := range e.Hosts {
		if err := checkHost(h, len(e.Hosts)); err != nil {
			return e, fmt.Errorf("host %d of %d %q: %w", i+1, len(e.Hosts), h, err)
		}
		// amqp091 parses each host's URL when it dials: a URL it refuses fails here, at
		// start, rather than at the first dial. Its errors quote the URL: the redacted one.
		if _, err := amqp.ParseURI(redacted.hostURL(h)); err != nil {
			return e, fmt.Errorf("host %q: %w", h, err)
		}
	}
	return e, nil
}

// checkHost reports what is wrong with one host[:port] of n.
func checkHost(h string, n int) error {
	if h == "" {
		if n == 1 {
			return nil // amqp://guest:guest@/ : amqp091's localhost
		}
		return errors.New("empty host")
	}
	name, port := h, ""
	if strings.HasPrefix(h, "[") { // [::1]:5672
		end := strings.Index(h, "]")
		if end < 0 {
			return errors.New("unclosed [")
		}
		name, port = h[1:end], strings.TrimPrefix(h[end+1:], ":")
		if h[end+1:] != "" && !strings.HasPrefix(h[end+1:], ":") {
			return errors.New("want [address]:port")
		}
	} else if i := strings.LastIndex(h, ":"); i >= 0 {
		name, port = h[:i], h[i+1:]
		if port == "" {
			return errors.New("empty port")
		}
		if strings.Contains(name, ":") {
			return errors.New("an IPv6 address goes in brackets, as in [::1]:5672")
		}
	}
	if name == "" {
		return errors.New("empty host")
	}
	if strings.ContainsAny(name, "[]") {
		return errors.New("a stray [ or ]")
	}
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("port %q: want 1 to 65535", port)
		}
	}
	return nil
}

// takeLoadBalancing removes load_balance_hosts from tail's query, leaving the rest of
// tail as it was, and reports whether it asked for random.
func takeLoadBalancing(tail string) (string, bool, error) {
	path, query, hasQuery := strings.Cut(tail, "?")
	if !hasQuery {
		return tail, false, nil
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	var kept []string
	random, found := false, false
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k != "load_balance_hosts" {
			kept = append(kept, kv)
			continue
		}
		found = true
		switch v {
		case "disable":
			random = false
		case "random":
			random = true
		default:
			return "", false, fmt.Errorf("load_balance_hosts=%q: want disable or random", v)
		}
	}
	if !found {
		return tail, false, nil
	}
	out := path
	if len(kept) > 0 {
		out += "?" + strings.Join(kept, "&")
	}
	if hasFragment {
		out += "#" + fragment
	}
	return out, random, nil
}

// hostURL is the single-host URL of h, as amqp091 dials it.
func (e Endpoints) hostURL(h string) string {
	s := e.scheme + "://"
	if e.userinfo != "" {
		s += e.userinfo + "@"
	}
	return s + h + e.tail
}

// Addrs returns the hosts as TCP addresses, in the order given: with the scheme's port
// (5672, or 5671 for amqps) where a host has none, and localhost for a lone empty host,
// as amqp091 dials them.
func (e Endpoints) Addrs() []string {
	addrs := make([]string, len(e.Hosts))
	for i, h := range e.Hosts {
		if uri, err := amqp.ParseURI(e.hostURL(h)); err == nil {
			addrs[i] = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
		}
	}
	return addrs
}

// URLs returns one single-host URL per host, in the order given.
func (e Endpoints) URLs() []string {
	urls := make([]string, len(e.Hosts))
	for i, h := range e.Hosts {
		urls[i] = e.hostURL(h)
	}
	return urls
}

// String returns the URL with every host, the password included: a URL to hand on to
// a client. Redacted is the one to print.
func (e Endpoints) String() string {
	if !e.Random {
		return e.hostURL(strings.Join(e.Hosts, ","))
	}
	path, query := e.tail, ""
	if i := strings.IndexAny(e.tail, "?#"); i >= 0 {
		path, query = e.tail[:i], e.tail[i:]
	}
	switch {
	case strings.HasPrefix(query, "?"):
		query = "?load_balance_hosts=random&" + query[1:]
	default: // no query, perhaps a fragment
		query = "?load_balance_hosts=random" + query
	}
	return e.withTail(path + query).hostURL(strings.Join(e.Hosts, ","))
}

func (e Endpoints) withTail(tail string) Endpoints {
	e.tail = tail
	return e
}

// Redacted returns String with the password, if any, replaced by xxxxx.
func (e Endpoints) Redacted() string {
	e.userinfo = redactUserinfo(e.userinfo)
	return e.String()
}

// User returns the user name, unescaped; "" without user information.
func (e Endpoints) User() string {
	u, err := url.Parse(e.scheme + "://" + e.userinfo + "@host/")
	if err != nil || u.User == nil {
		return ""
	}
	return u.User.Username()
}

// Login returns the user the connection logs in as: User, or guest when the URL names
// none, as amqp091-go then logs in. It is the user-id the broker lets the connection's
// messages carry.
func (e Endpoints) Login() string {
	if u := e.User(); u != "" {
		return u
	}
	return "guest"
}

// WithVHost returns the endpoints with the path set to the virtual host vhost, escaped;
// the query stays.
func (e Endpoints) WithVHost(vhost string) Endpoints {
	rest := ""
	if i := strings.IndexAny(e.tail, "?#"); i >= 0 {
		rest = e.tail[i:]
	}
	e.tail = "/" + url.PathEscape(vhost) + rest
	return e
}

// WithHosts returns the endpoints with hosts in place of Hosts, e.g. a proxy's address
// in place of the broker's.
func (e Endpoints) WithHosts(hosts ...string) Endpoints {
	e.Hosts = hosts
	return e
}

// Dial parses rawURL (ParseEndpoints) and dials it (Endpoints.Dial): amqp.DialConfig
// for a URL of one host or several.
func Dial(ctx context.Context, rawURL string, cfg amqp.Config) (*amqp.Connection, error) {
	e, err := ParseEndpoints(rawURL)
	if err != nil {
		return nil, fmt.Errorf("broker URL: %w", err)
	}
	return e.Dial(ctx, cfg)
}

// Dial opens an AMQP connection to the first host that answers, in the order given or,
// with Random, in a new random order. cfg is amqp091's, as for amqp.DialConfig; without
// a cfg.Dial, each host's dial is bounded by ctx and DialTimeout. Its error names every
// host tried and not the password.
func (e Endpoints) Dial(ctx context.Context, cfg amqp.Config) (*amqp.Connection, error) {
	if cfg.Dial == nil {
		cfg.Dial = dialer(ctx)
	}
	order := e.Hosts
	if e.Random {
		order = make([]string, len(e.Hosts))
		for i, j := range rand.Perm(len(e.Hosts)) {
			order[i] = e.Hosts[j]
		}
	}
	var failed dialFailures
	for _, h := range order {
		if err := ctx.Err(); err != nil {
			failed = append(failed, dialFailure{host: h, err: err})
			break
		}
		conn, err := amqp.DialConfig(e.hostURL(h), cfg)
		if err == nil {
			return conn, nil
		}
		failed = append(failed, dialFailure{host: h, err: redactErr(err, e.userinfo)})
	}
	return nil, failed
}

// dialFailures is one failed dial of every host of an Endpoints.
type dialFailures []dialFailure

type dialFailure struct {
	host string
	err  error
}

func (f dialFailures) Error() string {
	msgs := make([]string, len(f))
	for i, d := range f {
		host := d.host
		if host == "" {
			host = "localhost"
		}
		msgs[i] = host + ": " + d.err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (f dialFailures) Unwrap() []error {
	errs := make([]error, len(f))
	for i, d := range f {
		errs[i] = d.err
	}
	return errs
}

// redactErr keeps err, or, should its message carry the password of userinfo, an error
// with the same message less the password.
func redactErr(err error, userinfo string) error {
	_, pw, ok := strings.Cut(userinfo, ":")
	if !ok || pw == "" {
		return err
	}
	msg := err.Error()
	plain, _ := url.PathUnescape(pw)
	if !strings.Contains(msg, pw) && !strings.Contains(msg, plain) {
		return err
	}
	msg = strings.ReplaceAll(strings.ReplaceAll(msg, pw, "xxxxx"), plain, "xxxxx")
	return errors.New(msg)
}

func redactUserinfo(userinfo string) string {
	if user, _, ok := strings.Cut(userinfo, ":"); ok {
		return user + ":xxxxx"
	}
	return userinfo
}

// dialer bounds the TCP connect by ctx and DialTimeout and the AMQP handshake by
// DialTimeout, so a black-holed broker (a network partition, not a refused port) cannot
// hang the caller: with several hosts, each gets DialTimeout of its own.
func dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, DialTimeout)
		defer cancel()
		d := net.Dialer{KeepAlive: 15 * time.Second}
		conn, err := d.DialContext(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		// The AMQP handshake too: a link that accepts TCP and then stalls would otherwise
		// hang the dial for good. The library clears the deadline after the handshake, and
		// heartbeats watch the connection from then on.
		if err := conn.SetDeadline(time.Now().Add(DialTimeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}
