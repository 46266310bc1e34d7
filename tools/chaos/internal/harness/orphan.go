package harness

import (
	"net"
	"sync"
	"time"
)

// orphanProxy is a TCP forwarder between one process's Toxiproxy link to Postgres and
// Postgres itself that can half-close its connections: Orphan closes the side that leads
// to the process, so the process sees its connections end, and keeps the side to
// Postgres open and silent for a while, so the server keeps the sessions (their locks,
// their LISTEN, an open transaction) as if nothing had happened. That is what a NAT or
// load balancer that forgot an idle connection leaves behind; the server learns of it
// only when its TCP keepalive gives up, here when the proxy closes the server's side
// after keepFor.
type orphanProxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[*orphanConn]struct{}
	closing bool
}

// orphanConn is one proxied connection.
type orphanConn struct {
	client, server net.Conn
	orphaned       bool // guarded by orphanProxy.mu
}

// newOrphanProxy listens on a free loopback address in front of target.
func newOrphanProxy(target string) (*orphanProxy, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &orphanProxy{target: target, ln: ln, conns: map[*orphanConn]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *orphanProxy) addr() string { return p.ln.Addr().String() }

func (p *orphanProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *orphanProxy) forward(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &orphanConn{client: client, server: server}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, server, client, false); done <- struct{}{} }()
	go func() { p.pipe(c, client, server, true); done <- struct{}{} }()
	<-done
	// One side ended. An orphaned connection's server side stays open until Orphan's
	// timer closes it; any other connection ends as a whole.
	p.mu.Lock()
	orphaned := c.orphaned
	p.mu.Unlock()
	if !orphaned {
		_ = client.Close()
		_ = server.Close()
	}
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst; once the connection is orphaned, what the server sends is
// read and dropped, and what the gone client would have sent never comes.
func (p *orphanProxy) pipe(c *orphanConn, dst, src net.Conn, toClient bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			orphaned := c.orphaned
			p.mu.Unlock()
			if !(orphaned && toClient) {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// Orphan closes the process's side of every open connection and keeps the server's side
// open for keepFor, then closes it too. It returns how many connections it orphaned.
// New connections go through at once.
func (p *orphanProxy) Orphan(keepFor time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var servers []net.Conn
	for c := range p.conns {
		if c.orphaned {
			continue
		}
		c.orphaned = true
		_ = c.client.Close()
		servers = append(servers, c.server)
	}
	if len(servers) > 0 {
		time.AfterFunc(keepFor, func() {
			for _, s := range servers {
				_ = s.Close()
			}
		})
	}
	return len(servers)
}

func (p *orphanProxy) close() {
	p.mu.Lock()
	p.closing = true
	for c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
}

// addOrphanProxy puts an orphan proxy in front of Postgres at target for process name.
func (s *System) addOrphanProxy(name, target string) (*orphanProxy, error) {
	p, err := newOrphanProxy(target)
	if err != nil {
		return nil, err
	}
	s.orphanMu.Lock()
	defer s.orphanMu.Unlock()
	if s.orphans == nil {
		s.orphans = map[string]*orphanProxy{}
	}
	s.orphans[name] = p
	return p, nil
}

// OrphanPostgres half-closes every open Postgres connection of process name (Orphan),
// keeping the server's sessions for keepFor. It returns how many it orphaned, and false
// when the process has no orphan proxy (the cluster profile's links have none).
func (s *System) OrphanPostgres(name string, keepFor time.Duration) (int, bool) {
	s.orphanMu.Lock()
	p := s.orphans[name]
	s.orphanMu.Unlock()
	if p == nil {
		return 0, false
	}
	return p.Orphan(keepFor), true
}

func (s *System) closeOrphanProxies() {
	s.orphanMu.Lock()
	defer s.orphanMu.Unlock()
	for _, p := range s.orphans {
		p.close()
	}
}
