package httpapi_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// serve runs exampleAPI behind httpapi.Serve for hosts and returns its base URL.
func serve(t *testing.T, hosts httpapi.Hosts) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- httpapi.Serve(ctx, "127.0.0.1:0", hosts, exampleAPI(), slog.New(slog.DiscardHandler), func(a net.Addr) { addr <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + (<-addr).String()
}

// hostStatus sends GET /orders/1 to base with the Host header host.
func hostStatus(t *testing.T, base, host string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/orders/1", nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Content-Type")
}

// A server answers only localhost, loopback addresses, the names it is configured with,
// with or without a port, and the address a request arrived on; a page whose DNS name was
// rebound to 127.0.0.1 sends its own name, and gets a 421 problem.
func TestARequestForAnotherHostIsMisdirected(t *testing.T) {
	t.Parallel()
	loopback := serve(t, httpapi.Hosts{})
	bound := strings.TrimPrefix(loopback, "http://") // 127.0.0.1:port, the address it arrived on
	compose, err := httpapi.ParseHosts("ordering, ordering.bookstore.svc.cluster.local:8081")
	if err != nil {
		t.Fatal(err)
	}
	named := serve(t, compose)
	for _, c := range []struct {
		base, host string
		taken      bool
	}{
		{loopback, "localhost", true},
		{loopback, "localhost:8081", true},
		{loopback, "LOCALHOST.:8081", true},
		{loopback, "127.0.0.1", true},
		{loopback, "[::1]:8081", true},
		{loopback, "[0:0::1]", true},
		{loopback, bound, true},
		{loopback, "evil.example", false},
		{loopback, "evil.example:8081", false},
		{loopback, "localhost.evil.example", false},
		{loopback, "127.0.0.1.nip.io", false},
		{loopback, "127.0.0.2", true},
		{loopback, "10.0.0.1", false},
		{loopback, "ordering", false},
		{loopback, "localhost:http", false},
		{named, "ordering:8081", true},
		{named, "ordering.bookstore.svc.cluster.local", true},
		{named, strings.Replace(bound, "127.0.0.1", "127.0.0.1", 1), true},
		{named, "localhost:8081", true},
		{named, "inventory", false},
		{named, "ordering.evil.example", false},
	} {
		status, contentType := hostStatus(t, c.base, c.host)
		switch {
		case c.taken && status != http.StatusOK:
			t.Errorf("Host %q: %d, want 200", c.host, status)
		case !c.taken && (status != http.StatusMisdirectedRequest || contentType != "application/problem+json"):
			t.Errorf("Host %q: %d %s, want a 421 problem", c.host, status, contentType)
		}
	}
}

// HTTP_HOSTS is a list of names and IP addresses, each with or without a port; anything
// else stops the service at start.
func TestHTTPHostsTakesNamesAndAddressesOnly(t *testing.T) {
	t.Parallel()
	for list, ok := range map[string]bool{
		"": true,
		"ordering,ordering.bookstore.svc.cluster.local": true,
		"localhost:8081, [::1]:8081":                    true,
		"10.0.0.7":                                      true,
		"http://ordering":                               false,
		"ordering:":                                     false,
		"::1":                                           false,
		"ordering/x":                                    false,
		"ord ering":                                     false,
	} {
		if _, err := httpapi.ParseHosts(list); (err == nil) != ok {
			t.Errorf("HTTP_HOSTS=%q: %v, want ok %v", list, err, ok)
		}
	}
}

// FuzzHostIsALoopbackNameOrA421: whatever the Host header, the server with the default
// names answers it (200) only when it names localhost or a loopback address, whatever the
// port, case or trailing dot, and otherwise answers a 421 problem; HostName's answer
// names itself, and the Host and its name are taken alike.
func FuzzHostIsALoopbackNameOrA421(f *testing.F) {
	for _, seed := range []string{
		"localhost", "localhost:8081", "LocalHost.", "127.0.0.1:80", "[::1]", "[::1]:8081", "[0::1]",
		"[::ffff:127.0.0.1]", "[fe80::1%25eth0]", "::1", "evil.example", "localhost.evil.example",
		"127.0.0.1.nip.io", "127.1", "2130706433", "0x7f.0.0.1", "127.000.000.001", "localhost:",
		"localhost:99999999", ":8081", "[", "[]", "]", "localhost\x00", "local host", "",
	} {
		f.Add(seed)
	}
	api := httpapi.RequireHost(httpapi.Hosts{}, exampleAPI())
	isLoopback := func(name string) bool {
		ip, err := netip.ParseAddr(strings.Trim(name, "[]"))
		return name == "localhost" || err == nil && ip.Unmap().IsLoopback()
	}
	f.Fuzz(func(t *testing.T, host string) {
		name, ok := httpapi.HostName(host)
		if ok {
			if again, ok2 := httpapi.HostName(name); !ok2 || again != name {
				t.Fatalf("Host %q: name %q names %q, %v", host, name, again, ok2)
			}
			if (httpapi.Hosts{}).Allows(host, nil) != (httpapi.Hosts{}).Allows(name, nil) {
				t.Fatalf("Host %q and its name %q are taken differently", host, name)
			}
		}
		req := httptest.NewRequest(http.MethodGet, "/orders/1", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			if !ok || !isLoopback(name) {
				t.Fatalf("Host %q (name %q, %v) was answered", host, name, ok)
			}
		case http.StatusMisdirectedRequest:
			if ok && isLoopback(name) {
				t.Fatalf("Host %q names %q, a loopback name, and was refused", host, name)
			}
			if rec.Header().Get("Content-Type") != "application/problem+json" || rec.Body.Len() > 2<<10 {
				t.Fatalf("Host %q: a 421 of %d bytes as %s", host, rec.Body.Len(), rec.Header().Get("Content-Type"))
			}
		default:
			t.Fatalf("Host %q: %d", host, rec.Code)
		}
	})
}
