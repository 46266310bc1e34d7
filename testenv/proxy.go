package testenv

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP forwarder a test puts between a service and Postgres or RabbitMQ, to
// cut the link the way a refused port or a reset would (established connections die, new
// ones are refused), or stall it the way a black-holed route would (connections stay
// open and nothing gets through), and then restore it, without stopping the server other
// tests share.
type Proxy struct {
	Addr   string // host:port to connect to instead of the target
	target string
	ln     net.Listener
	amqp   bool // the server's bytes are AMQP frames: see NewAMQPProxy

	mu      sync.Mutex
	cut     bool
	stalled bool
	match   []byte     // stall only connections whose client said this; nil: all
	resumed *sync.Cond // broadcast when a stall ends
	refused int
	conns   map[net.Conn]struct{}
	links   map[*link]struct{}
}

// NewProxy starts a proxy to target that stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, links: map[*link]struct{}{}}
	p.resumed = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
	})
	return p
}

// Cut closes every connection through the proxy and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.resumed.Broadcast() // held chunks are dropped with their connections
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Stall holds every byte in both directions, on open connections and new ones, until
// Restore: the peer sees a silent link, not a closed one, as with Toxiproxy's timeout.
func (p *Proxy) Stall() { p.StallMatching("") }

// StallMatching stalls only the connections whose client has sent text among its first
// 4 KiB, and lets the others flow: for example one AMQP connection of a service by its
// connection_name, which the client sends in its handshake.
func (p *Proxy) StallMatching(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	p.match = nil
	if text != "" {
		p.match = []byte(text)
	}
}

// OrphanMatching closes the client side of the open connections whose client has sent
// text among its first 4 KiB, and keeps their server side open until the test ends,
// reading and dropping what the server sends: the client sees its connection end, and the
// server keeps the session, as when a NAT or load balancer between them forgot the
// connection while it was idle. New connections go through. It returns how many it
// orphaned.
func (p *Proxy) OrphanMatching(text string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if !l.orphaned && bytes.Contains(l.hello, []byte(text)) {
			l.orphaned = true
			_ = l.client.Close()
			n++
		}
	}
	return n
}

// link is one proxied connection: what its client sent first, to match it by.
type link struct {
	hello  []byte // guarded by Proxy.mu
	client net.Conn
	// orphaned: the client side is closed and the server side kept open (OrphanMatching);
	// guarded by Proxy.mu.
	orphaned bool
	// toClient is held while a whole frame is written to the client, so that a frame
	// the proxy makes up itself lands between two of the server's (NewAMQPProxy).
	toClient sync.Mutex
}

const helloSize = 4096

func (p *Proxy) stalls(l *link) bool {
	return p.stalled && !p.cut && (p.match == nil || bytes.Contains(l.hello, p.match))
}

// Restore lets connections through again, and what a stall held goes on its way.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.stalled, p.match = false, false, nil
	p.resumed.Broadcast()
}

// Refused returns how many connections the proxy refused while cut: each is an attempt
// of the client to get through, an event a test can wait for instead of the clock.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// copy is io.Copy that holds each chunk while the proxy stalls l. It records the first
// bytes from the client in l.hello.
func (p *Proxy) copy(dst, src net.Conn, l *link, fromClient bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if fromClient && len(l.hello) < helloSize {
				l.hello = append(l.hello, buf[:min(n, helloSize-len(l.hello))]...)
			}
			for p.stalls(l) {
				p.resumed.Wait()
			}
			orphaned := l.orphaned
			p.mu.Unlock()
			if orphaned {
				continue // the server's bytes to a client that is gone
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *Proxy) forward(client net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.refused++
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	p.mu.Unlock()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	l := &link{client: client}
	p.mu.Lock()
	p.links[l] = struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		if p.amqp && src == server {
			p.copyFrames(dst, src, l)
		} else {
			p.copy(dst, src, l, src == client)
		}
		p.mu.Lock()
		keep := l.orphaned && src == client // the server side stays until it ends, or Cut
		p.mu.Unlock()
		if keep {
			done <- struct{}{}
			return
		}
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	delete(p.links, l)
	p.mu.Unlock()
}
