package broker_test

import (
	"context"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// liveVHost returns a fresh vhost's URL split into its parts: the user information, the
// live broker's host:port and the vhost's path.
func liveVHost(t *testing.T) (user *url.Userinfo, host, path string) {
	t.Helper()
	u, err := url.Parse(testenv.VHost(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.User, u.Host, u.EscapedPath()
}

// A Conn given a dead node first and a live one second opens its channel on the live
// one: it dials past the dead address instead of reporting the broker down.
func TestAConnDialsTheNextBrokerAddressWhenOneIsDown(t *testing.T) {
	user, live, path := liveVHost(t)
	dead := testenv.FreeAddr(t)
	conn := broker.NewConn("amqp://"+user.String()+"@"+dead+","+live+path, "next-address")
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel(context.Background())
	if err != nil {
		t.Fatalf("Channel with %s down and %s up: %v", dead, live, err)
	}
	_ = ch.Close()
}

// When every node is down, the error is an outage (ErrUnavailable, no message's fault),
// names every address it tried, so the operator sees which, and never the password.
func TestAConnWhoseBrokersAreAllDownFailsUnavailableNamingEveryAddressAndNoPassword(t *testing.T) {
	a, b := testenv.FreeAddr(t), testenv.FreeAddr(t)
	conn := broker.NewConn("amqp://guest:s3cret-pw@"+a+","+b+"/", "all-down")
	t.Cleanup(func() { _ = conn.Close() })
	_, err := conn.Channel(context.Background())
	if !broker.Unavailable(err) {
		t.Fatalf("Channel with every node down = %v, want a broker.ErrUnavailable", err)
	}
	for _, addr := range []string{a, b} {
		if strings.Count(err.Error(), addr) < 2 { // in the URL and in its own failure
			t.Errorf("the error does not say what became of %s: %v", addr, err)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error carries the password: %v", err)
	}
}

// Without load_balance_hosts every dial goes to the first live host given; with
// load_balance_hosts=random the dials spread over all of them. Two routes to the same
// broker (one through a proxy) stand in for two nodes.
func TestRandomLoadBalancingSpreadsDialsOverEveryHostAndTheDefaultKeepsTheOrder(t *testing.T) {
	user, live, path := liveVHost(t)
	proxy := testenv.NewProxy(t, live)
	reached := func(query string) map[string]int {
		e, err := broker.ParseEndpoints("amqp://" + user.String() + "@" + proxy.Addr + "," + live + path + query)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for range 30 {
			conn, err := e.Dial(context.Background(), amqp.Config{})
			if err != nil {
				t.Fatal(err)
			}
			seen[conn.RemoteAddr().String()]++
			_ = conn.Close()
		}
		return seen
	}
	if seen := reached(""); !reflect.DeepEqual(seen, map[string]int{proxy.Addr: 30}) {
		t.Errorf("dials in the order given reached %v, want %s every time", seen, proxy.Addr)
	}
	// The chance that 30 random dials all pick the same first host is 2^-29.
	if seen := reached("?load_balance_hosts=random"); len(seen) != 2 {
		t.Errorf("random dials reached %v, want both %s and %s", seen, proxy.Addr, live)
	}
}

// The syntax of AMQP_URL: one host or several behind one user information, each with a
// valid port; the vhost, the query and a lone empty host (amqp091's localhost) as before.
func TestABrokerURLNamesOneOrMoreHostsBehindOneUserInformation(t *testing.T) {
	for _, tc := range []struct {
		url    string
		hosts  []string
		random bool
		urls   []string // URLs, when it parses
		err    string   // a part of the error, when it does not
	}{
		{url: "amqp://guest:guest@localhost:5672/", hosts: []string{"localhost:5672"}, urls: []string{"amqp://guest:guest@localhost:5672/"}},
		{url: "amqp://guest:guest@/", hosts: []string{""}, urls: []string{"amqp://guest:guest@/"}},
		{url: "amqp://", hosts: []string{""}, urls: []string{"amqp://"}},
		{url: "amqps://u:p%40ss@h1,h2:5671/v%2Fx?heartbeat=5", hosts: []string{"h1", "h2:5671"},
			urls: []string{"amqps://u:p%40ss@h1/v%2Fx?heartbeat=5", "amqps://u:p%40ss@h2:5671/v%2Fx?heartbeat=5"}},
		{url: "amqp://u:p@10.0.0.1:5672,[::1]:5673,rabbit-2:5672/vh?load_balance_hosts=random&heartbeat=5", random: true,
			hosts: []string{"10.0.0.1:5672", "[::1]:5673", "rabbit-2:5672"},
			urls:  []string{"amqp://u:p@10.0.0.1:5672/vh?heartbeat=5", "amqp://u:p@[::1]:5673/vh?heartbeat=5", "amqp://u:p@rabbit-2:5672/vh?heartbeat=5"}},
		{url: "amqp://u:p@h1,h2/?load_balance_hosts=disable", hosts: []string{"h1", "h2"}, urls: []string{"amqp://u:p@h1/", "amqp://u:p@h2/"}},
		{url: "amqp://u:p@h1:5672,,h2:5672/", err: "empty host"},
		{url: "amqp://u:p@h1:5672,/", err: "empty host"},
		{url: "amqp://u:p@h1:5672,:5672/", err: "empty host"},
		{url: "amqp://u:p@h1:56x2,h2/", err: "port"},
		{url: "amqp://u:p@h1:0/", err: "port"},
		{url: "amqp://u:p@h1:65536/", err: "port"},
		{url: "amqp://u:p@h1:/", err: "empty port"},
		{url: "amqp://u:p@h1,u:p@h2/", err: "user information given more than once"},
		{url: "amqp://u:p@h1/?load_balance_hosts=round-robin", err: "load_balance_hosts"},
		{url: "http://u:p@h1/", err: "want amqp://"},
		{url: "h1:5672", err: "want amqp://"},
		{url: "amqp://u:p@[::1/", err: "unclosed"},
	} {
		e, err := broker.ParseEndpoints(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseEndpoints(%q) = %v, want an error about %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseEndpoints(%q): %v", tc.url, err)
			continue
		}
		if !slices.Equal(e.Hosts, tc.hosts) || e.Random != tc.random || !slices.Equal(e.URLs(), tc.urls) {
			t.Errorf("ParseEndpoints(%q) = hosts %q random %v URLs %q, want %q %v %q", tc.url, e.Hosts, e.Random, e.URLs(), tc.hosts, tc.random, tc.urls)
		}
		if again, err := broker.ParseEndpoints(e.String()); err != nil || !reflect.DeepEqual(again, e) {
			t.Errorf("ParseEndpoints(%q).String() = %q, which parses to %+v, %v", tc.url, e.String(), again, err)
		}
		if len(tc.hosts) == 1 && e.String() != tc.url {
			t.Errorf("a single host's URL changed: %q became %q", tc.url, e.String())
		}
	}
}

// The vhost, the user and the redacted form each tools/chaos, the sandbox and the tests
// derive from AMQP_URL keep every host.
func TestAVHostOfAMultiHostURLKeepsEveryHostAndTheQuery(t *testing.T) {
	e, err := broker.ParseEndpoints("amqp://u%20x:p%3Aw@h1:1,h2:2/old?load_balance_hosts=random&heartbeat=5")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.WithVHost("demo/1").String(), "amqp://u%20x:p%3Aw@h1:1,h2:2/demo%2F1?load_balance_hosts=random&heartbeat=5"; got != want {
		t.Errorf("WithVHost = %q, want %q", got, want)
	}
	if got, want := e.Redacted(), "amqp://u%20x:xxxxx@h1:1,h2:2/old?load_balance_hosts=random&heartbeat=5"; got != want {
		t.Errorf("Redacted = %q, want %q", got, want)
	}
	if got := e.User(); got != "u x" {
		t.Errorf("User = %q, want %q", got, "u x")
	}
	if got, want := e.WithHosts("proxy:9").String(), "amqp://u%20x:p%3Aw@proxy:9/old?load_balance_hosts=random&heartbeat=5"; got != want {
		t.Errorf("WithHosts = %q, want %q", got, want)
	}
}

// FuzzABrokerURLParsesToWhatItSaysOrFailsWithoutThePassword: whatever AMQP_URL's hosts
// and query hold, ParseEndpoints does not panic; a URL it accepts prints (String) to one
// that parses to the same endpoints, each host a valid host[:port] amqp091 accepts; a URL
// it refuses is refused without the password in the error.
func FuzzABrokerURLParsesToWhatItSaysOrFailsWithoutThePassword(f *testing.F) {
	for _, seed := range [][2]string{
		{"localhost:5672", "/"},
		{"h1:5672,h2:5673", "/v?load_balance_hosts=random"},
		{"h1:5672,,h2", "/"},
		{"[::1]:5672,h2", "/v%2F?heartbeat=x"},
		{"h1:99999", ""},
		{"u:p@h1", "?load_balance_hosts=x#f"},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	const password = "Zq9-secret-Zq9"
	f.Fuzz(func(t *testing.T, hosts, tail string) {
		if strings.Contains(hosts+tail, password) {
			return
		}
		raw := "amqp://guest:" + password + "@" + hosts + tail
		e, err := broker.ParseEndpoints(raw)
		if err != nil {
			if strings.Contains(err.Error(), password) {
				t.Fatalf("ParseEndpoints(%q) error carries the password: %v", raw, err)
			}
			return
		}
		again, err := broker.ParseEndpoints(e.String())
		if err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("ParseEndpoints(%q).String() = %q, which parses to %+v, %v; want %+v", raw, e.String(), again, err, e)
		}
		for _, h := range e.Hosts {
			if h == "" && len(e.Hosts) == 1 {
				continue
			}
			if _, _, err := net.SplitHostPort(h); err != nil && strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				t.Fatalf("host %q of %q is no host[:port]: %v", h, raw, err)
			}
		}
		for _, u := range e.URLs() {
			if _, err := amqp.ParseURI(u); err != nil {
				t.Fatalf("amqp091 refuses %q of %q: %v", u, raw, err)
			}
		}
	})
}
