package testenv_test

import (
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

// A broker too busy to answer one AMQP handshake within the product's bound does not
// fail a test's set-up: the first connection here is accepted and never answered, as a
// loaded broker's can be, and DialAMQP connects on the next one.
func TestASetUpDialOutlastsAHandshakeTheBrokerLeavesUnanswered(t *testing.T) {
	t.Parallel()
	amqpURL := testenv.VHost(t)
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	brokerAddr := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1) == 1 {
				t.Cleanup(func() { _ = client.Close() }) // held open, never answered
				continue
			}
			go relay(client, brokerAddr)
		}
	}()
	u.Host = ln.Addr().String()

	began := time.Now()
	conn, err := testenv.DialAMQP(t, u.String())
	if err != nil {
		t.Fatalf("DialAMQP after one unanswered handshake: %v", err)
	}
	_ = conn.Close()
	if n := accepted.Load(); n != 2 {
		t.Errorf("DialAMQP connected %d times, want 2: one left unanswered, one answered", n)
	}
	if took := time.Since(began); took < broker.DialTimeout {
		t.Errorf("DialAMQP returned after %v, before the first handshake's %v bound", took, broker.DialTimeout)
	}
}

// A port nobody listens on is a broker that is down, not a slow one: DialAMQP fails at
// once instead of trying until its deadline.
func TestASetUpDialToAPortNobodyListensOnFailsAtOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	began := time.Now()
	if conn, err := testenv.DialAMQP(t, "amqp://guest:guest@"+addr+"/"); err == nil {
		_ = conn.Close()
		t.Fatal("DialAMQP connected to a closed port")
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("DialAMQP gave up on a closed port after %v, want at once", took)
	}
}

// relay copies bytes both ways between client and the server at addr.
func relay(client net.Conn, addr string) {
	server, err := net.Dial("tcp", addr)
	if err != nil {
		_ = client.Close()
		return
	}
	go func() {
		defer server.Close()
		_, _ = server.(*net.TCPConn).ReadFrom(client)
	}()
	defer client.Close()
	_, _ = client.(*net.TCPConn).ReadFrom(server)
}
