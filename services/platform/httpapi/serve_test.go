package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// serveOK runs httpapi.Serve on a loopback port with a handler that answers 200 to
// anything, until the test ends, and returns its address.
func serveOK(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	go func() {
		done <- httpapi.Serve(ctx, "127.0.0.1:0", httpapi.Hosts{}, ok, slog.New(slog.DiscardHandler), func(a net.Addr) { addrc <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addrc:
		return a.String()
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

// keepAlive dials addr, sends one request and reads its answer, and returns the
// connection, idle and kept alive.
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

// closed reports whether the server has closed c.
func closed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// A client holding thousands of idle keep-alive connections holds at most MaxConns of
// them: past that, the listener closes the connections idle longest to take new ones, so
// the server's file descriptors and memory stay bounded and a probe still answers at once.
func TestThousandsOfIdleConnectionsLeaveTheServerAnswering(t *testing.T) {
	t.Parallel()
	addr := serveOK(t)
	const n = 3 * httpapi.MaxConns
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = keepAlive(t, addr)
	}
	open := 0
	for _, c := range conns {
		if !closed(c) {
			open++
		}
	}
	if open > httpapi.MaxConns {
		t.Errorf("%d of %d idle connections are open, want at most %d", open, n, httpapi.MaxConns)
	}
	if open < httpapi.MaxConns/2 {
		t.Errorf("%d of %d idle connections are open, want the server to keep those it has room for (%d)", open, n, httpapi.MaxConns)
	}
	client := &http.Client{Timeout: time.Second}
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a probe beside %d idle connections: %v", open, err)
	}
	resp.Body.Close()
	t.Logf("%d of %d idle connections left open; a probe answered in %v", open, n, time.Since(start))
}

// An idle keep-alive connection is closed after IdleTimeout, well before the 2 minutes
// a client could hold one for each request it sent.
func TestAnIdleConnectionIsClosedSoon(t *testing.T) {
	t.Parallel()
	if httpapi.IdleTimeout > 30*time.Second {
		t.Errorf("IdleTimeout = %v, want at most 30 s", httpapi.IdleTimeout)
	}
	c := keepAlive(t, serveOK(t))
	start := time.Now()
	for !closed(c) {
		if time.Since(start) > httpapi.IdleTimeout+5*time.Second {
			t.Fatalf("an idle connection still open after %v", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("an idle connection closed after %v", time.Since(start))
}

// A request that declares both Content-Length and Transfer-Encoding is answered and its
// connection closed (RFC 9112 §6.3): a proxy in front that went by the Content-Length
// would take the rest of the bytes for the next request, and the server must not serve
// what the proxy never saw as one. The request pipelined behind it gets no answer.
func TestARequestWithContentLengthAndTransferEncodingClosesItsConnection(t *testing.T) {
	t.Parallel()
	addr := serveOK(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	smuggled := "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	if _, err := io.WriteString(c, smuggled); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	first, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, first.Body)
	first.Body.Close()
	if second, err := http.ReadResponse(r, nil); err == nil {
		t.Fatalf("the request pipelined behind Content-Length and Transfer-Encoding was answered %s; want the connection closed after the first", second.Status)
	}
	if !first.Close {
		t.Errorf("the answer to Content-Length with Transfer-Encoding did not say Connection: close")
	}
}
