package harness

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
)

// A process of the cluster profile reaches each dependency through several hosts, one
// proxy each, behind one link: a fault on the link must strike every host, or a
// link_down would only move the process to the next node and test nothing.
func TestALinkDownOnADependencyOfSeveralHostsCutsEveryHost(t *testing.T) {
	n := testNetwork(t)
	var upstreams []string
	for range 2 {
		upstreams = append(upstreams, testUpstream(t, func(c net.Conn) {
			_, _ = c.Write([]byte("x"))
			_ = c.Close()
		}))
	}
	addrs, err := n.AddLinkGroup("p-postgres", upstreams)
	if err != nil {
		t.Fatal(err)
	}
	if names := n.LinkNames(); len(names) != 1 || names[0] != "p-postgres" {
		t.Fatalf("links %v, want the one link p-postgres", names)
	}
	reaches := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 1)
		_, err = c.Read(b)
		return err == nil && b[0] == 'x'
	}
	for i, a := range addrs {
		if !reaches(a) {
			t.Fatalf("host %d not reachable through %s before the fault", i, a)
		}
	}
	if err := n.Down("p-postgres"); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if reaches(a) {
			t.Errorf("host %d still reachable through %s with the link down", i, a)
		}
	}
	if err := n.Up("p-postgres"); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if !reaches(a) {
			t.Errorf("host %d not reachable through %s after the link came back", i, a)
		}
	}
}

// Toxiproxy answers a request that takes longer than 25 s with a timeout page while the
// request goes on: taking a latency toxic off waits until the data it holds is written,
// for as long as the process at the link's end is frozen by a queue fault. Compare runs
// failed their default design on it ("the harness's own error: invalid character '<'").
// The harness asks again until the toxic is off, and an add that timed out leaves no
// toxic behind, on any of the link's hosts, and says the link was busy.
func TestAToxicWhoseRequestTimedOutIsNotLeftOnTheLink(t *testing.T) {
	n := testNetwork(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if _, err := n.AddLinkGroup("p-rabbitmq", []string{ln.Addr().String(), ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	// In front of the API: the timeOut[method]th request of a method from now is carried
	// out and answered with http.TimeoutHandler's page, as Toxiproxy's API does.
	api, err := url.Parse("http://" + n.api)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(api)
	var mu sync.Mutex
	timeOut := map[string]int{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		timeOut[r.Method]--
		late := timeOut[r.Method] == 0
		mu.Unlock()
		if !late {
			forward.ServeHTTP(w, r)
			return
		}
		forward.ServeHTTP(httptest.NewRecorder(), r)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "<html><head><title>Timeout</title></head><body><h1>Timeout</h1></body></html>")
	}))
	t.Cleanup(front.Close)
	l, _ := n.link("p-rabbitmq")
	for i, p := range l.proxies {
		if l.proxies[i], err = toxiclient.NewClient(front.URL).Proxy(p.Name); err != nil {
			t.Fatal(err)
		}
	}
	onLink := func() []string {
		var names []string
		for _, p := range l.proxies {
			toxics, err := p.Toxics()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range toxics {
				names = append(names, p.Name+":"+x.Name)
			}
		}
		return names
	}

	if err := n.AddToxic("p-rabbitmq", "latency-1", "latency", toxiclient.Attributes{"latency": 100}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	timeOut[http.MethodDelete] = 1
	mu.Unlock()
	if err := n.RemoveToxic("p-rabbitmq", "latency-1"); err != nil || len(onLink()) > 0 {
		t.Errorf("a removal answered with the timeout page: err %v, toxics left %v", err, onLink())
	}

	mu.Lock()
	timeOut[http.MethodPost] = 2 // the second host's: the first has the toxic already
	mu.Unlock()
	err = n.AddToxic("p-rabbitmq", "latency-2", "latency", toxiclient.Attributes{"latency": 100})
	if !errors.Is(err, ErrLinkBusy) || len(onLink()) > 0 {
		t.Errorf("an add answered with the timeout page: err %v (want ErrLinkBusy), toxics left %v", err, onLink())
	}
}

// testUpstream listens on a loopback port, serving each connection with serve, until the
// test ends; it returns the address.
func testUpstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// testNetwork is a Toxiproxy server in this process for one test, closed after it.
func testNetwork(t *testing.T) *network {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "toxiproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNetwork(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	return n
}

// A latency fault's end once took minutes: its toxic acted on what the dependency sends,
// the process at the link's end was frozen by a queue fault and read nothing, and
// Toxiproxy takes a latency toxic off by writing its buffer on, under the proxy's lock.
// Here the dependency sends without pause to a client that reads nothing: the toxic
// comes off in moments, and the link takes new connections meanwhile.
func TestALatencyToxicComesOffALinkWhoseProcessReadsNothing(t *testing.T) {
	n := testNetwork(t)
	dependency := testUpstream(t, func(c net.Conn) { // sends whatever the client reads
		defer c.Close()
		chunk := make([]byte, 4096)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	addr, err := n.AddLink("p-rabbitmq", dependency)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.AddToxic("p-rabbitmq", "latency-1", "latency", toxiclient.Attributes{"latency": 50}); err != nil {
		t.Fatal(err)
	}
	frozen, err := net.Dial("tcp", addr) // a process that reads nothing
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Close() })
	time.Sleep(500 * time.Millisecond) // the link fills up toward it

	removed := make(chan error, 1)
	start := time.Now()
	go func() { removed <- n.RemoveToxic("p-rabbitmq", "latency-1") }()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the latency toxic was still being taken off after %v: Toxiproxy writes its buffer toward a process that reads nothing", time.Since(start).Round(time.Second))
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("a new connection through the link after the toxic came off: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Errorf("a new connection through the link reads nothing: %v", err)
	}
	_ = c.Close()
}
