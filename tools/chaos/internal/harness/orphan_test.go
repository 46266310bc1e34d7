package harness

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// Orphan ends the client's side of a connection and leaves the server's side open and
// silent, as a NAT that forgot the connection does; new connections go through.
func TestOrphanClosesTheClientsSideAndKeepsTheServersOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	p, err := newOrphanProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	defer server.Close()
	// The connection works before: the proxy knows it once bytes went through.
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("server read %q, %v", buf, err)
	}

	if n := p.Orphan(time.Hour); n != 1 {
		t.Fatalf("orphaned %d connections, want 1", n)
	}
	if _, err := client.Read(buf); err == nil {
		t.Fatal("the client's side still open after Orphan")
	}
	// The server's side is open: what it sends is taken and dropped, and it reads no
	// end of the connection.
	if _, err := server.Write([]byte("notice")); err != nil {
		t.Fatalf("server write after Orphan: %v", err)
	}
	_ = server.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := server.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("server read after Orphan: %v, want it still open and silent", err)
	}

	// A new connection goes through.
	again, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	server2 := <-accepted
	defer server2.Close()
	if _, err := again.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server2, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("new connection: server read %q, %v", buf, err)
	}

	// When the proxy lets go, the server learns of the end.
	p.close()
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := server.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("server read after the proxy closed: %v, want EOF", err)
	}
}
