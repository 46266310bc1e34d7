package harness

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/bookstore-go/bookstore/testenv"
)

// alarmProxy stands between one process's Toxiproxy link and RabbitMQ and reads the
// server's side of every connection as AMQP 0-9-1 frames, so that it can speak for the
// broker between two of them: it tells the process's publishing connections what a memory
// or disk alarm would (connection.blocked), drops one of them while it is blocked, and
// tells them connection.unblocked when the alarm ends. The broker itself stays healthy for
// everyone else on the machine. Every other byte passes through untouched, so the
// Toxiproxy faults in front of it work as before.
//
// A frame is type (1 octet), channel (2), size (4), payload (size octets) and the end
// octet 0xCE; a method frame's payload starts with its class and method ids (2 octets
// each). connection.blocked is class 10, method 60, with a short string (1 octet of
// length, then the text); connection.unblocked is method 61 without arguments.
type alarmProxy struct {
	name    string   // the process
	targets []string // the broker's nodes, tried in turn
	ln      net.Listener

	mu      sync.Mutex
	conns   map[*amqpConn]struct{}
	alarm   string // the reason while an alarm is on; "" otherwise
	late    int    // connections blocked during this alarm when they published
	match   []byte // which connections the alarm blocks: their client said this in its handshake
	closing bool
}

// amqpConn is one proxied connection.
type amqpConn struct {
	client, server net.Conn
	hello          []byte // the client's first bytes (its handshake names the connection); guarded by alarmProxy.mu
	open           bool   // the server has sent connection.open-ok: the handshake is over; guarded by alarmProxy.mu
	blocked        bool   // told connection.blocked and not yet unblocked; guarded by alarmProxy.mu
	toClient       sync.Mutex
	framed         bool // the server's stream parsed as frames so far; a made-up frame may be sent only then; guarded by toClient
}

const amqpHelloSize = 4096

// newAlarmProxy listens on a free loopback address in front of targets, the nodes of one
// broker: each connection goes to the first that answers, so a process behind the proxy
// follows a cluster whose node died as it would with every node in its AMQP_URL.
func newAlarmProxy(name string, targets ...string) (*alarmProxy, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("alarm proxy for %s: %w", name, err)
	}
	p := &alarmProxy{name: name, targets: targets, ln: ln, conns: map[*amqpConn]struct{}{}}
	go p.accept()
	return p, nil
}

// addr is where the process's Toxiproxy link sends its connections.
func (p *alarmProxy) addr() string { return p.ln.Addr().String() }

func (p *alarmProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *alarmProxy) forward(client net.Conn) {
	var server net.Conn
	err := errors.New("no broker")
	for _, target := range p.targets {
		if server, err = net.Dial("tcp", target); err == nil {
			break
		}
	}
	if err != nil {
		_ = client.Close()
		return
	}
	c := &amqpConn{client: client, server: server, framed: true}
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
	go func() { p.fromClient(c); done <- struct{}{} }()
	go func() { p.fromServer(c); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// fromClient copies the client's bytes to the server and keeps the first of them. After
// the protocol header it reads them as frames too: a connection that publishes during an
// alarm is told it is blocked, as RabbitMQ tells one (the publish itself goes through; a
// client that heeds connection.blocked sends no more).
func (p *alarmProxy) fromClient(c *amqpConn) {
	const protocolHeader = 8
	buf := make([]byte, 0, 32*1024)
	keep := func(b []byte) {
		p.mu.Lock()
		if len(c.hello) < amqpHelloSize {
			c.hello = append(c.hello, b[:min(len(b), amqpHelloSize-len(c.hello))]...)
		}
		p.mu.Unlock()
	}
	buf = buf[:protocolHeader]
	if _, err := io.ReadFull(c.client, buf); err != nil {
		return
	}
	keep(buf)
	if _, err := c.server.Write(buf); err != nil {
		return
	}
	for {
		buf = buf[:7]
		if _, err := io.ReadFull(c.client, buf); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(buf[3:7]))
		if size > 1<<24 {
			// Not a frame the proxy understands: pass the rest through unread.
			if _, err := c.server.Write(buf); err == nil {
				_, _ = io.Copy(c.server, c.client)
			}
			return
		}
		buf = append(buf, make([]byte, size+1)...)
		if _, err := io.ReadFull(c.client, buf[7:]); err != nil {
			return
		}
		keep(buf)
		if _, err := c.server.Write(buf); err != nil {
			return
		}
		if isMethod(buf, 60, 40) { // basic.publish
			p.mu.Lock()
			reason, block := p.alarm, p.alarm != "" && c.open && !c.blocked && bytes.Contains(c.hello, p.match)
			if block {
				c.blocked = true
				p.late++
			}
			p.mu.Unlock()
			if block {
				_ = c.send(testenv.AMQPBlocked(reason))
			}
		}
	}
}

// fromServer copies the server's frames to the client one whole frame at a time, holding
// toClient while it writes one, so that a frame the proxy makes up lands between two of
// the server's, and notes when the handshake is over (connection.open-ok).
func (p *alarmProxy) fromServer(c *amqpConn) {
	const header = 7
	buf := make([]byte, 0, 32*1024)
	for {
		buf = buf[:header]
		if _, err := io.ReadFull(c.server, buf); err != nil {
			return
		}
		if buf[0] < 1 || buf[0] > 8 || buf[0] == 5 || buf[0] == 6 || buf[0] == 7 {
			// Not a frame (a protocol header the server sends back when it refuses the
			// client's version, or a stream that lost its frame boundaries): pass the rest
			// through as it comes, and never make up a frame on this connection again.
			c.toClient.Lock()
			c.framed = false
			_, err := c.client.Write(buf)
			c.toClient.Unlock()
			if err == nil {
				_, _ = io.Copy(c.client, c.server)
			}
			return
		}
		size := int(binary.BigEndian.Uint32(buf[3:7]))
		buf = append(buf, make([]byte, size+1)...)
		if _, err := io.ReadFull(c.server, buf[header:]); err != nil {
			return
		}
		c.toClient.Lock()
		if buf[len(buf)-1] != 0xCE {
			c.framed = false
		}
		_, err := c.client.Write(buf)
		c.toClient.Unlock()
		if err != nil {
			return
		}
		if isMethod(buf, 10, 41) { // connection.open-ok: the handshake is over
			p.mu.Lock()
			c.open = true
			p.mu.Unlock()
		}
	}
}

// isMethod reports whether frame is the method class.method.
func isMethod(frame []byte, class, method uint16) bool {
	return len(frame) >= 12 && frame[0] == 1 &&
		binary.BigEndian.Uint16(frame[7:9]) == class && binary.BigEndian.Uint16(frame[9:11]) == method
}

// send writes a frame the proxy made up to the client, between two of the server's.
func (c *amqpConn) send(frame []byte) error {
	c.toClient.Lock()
	defer c.toClient.Unlock()
	if !c.framed {
		return errors.New("the server's stream is not framed")
	}
	_, err := c.client.Write(frame)
	return err
}

// Block starts an alarm: every open connection whose client said match in its handshake
// is told connection.blocked with reason, and so is every such connection that publishes
// until unblock (a connection opened again after a drop). It returns how many it told now.
func (p *alarmProxy) Block(match, reason string) int {
	p.mu.Lock()
	p.alarm, p.match = reason, []byte(match)
	var picked []*amqpConn
	for c := range p.conns {
		if c.open && !c.blocked && bytes.Contains(c.hello, p.match) {
			c.blocked = true
			picked = append(picked, c)
		}
	}
	p.mu.Unlock()
	n := 0
	for _, c := range picked {
		if c.send(testenv.AMQPBlocked(reason)) == nil {
			n++
		}
	}
	return n
}

// DropBlocked closes every connection that is blocked now, as a link that fails during
// the alarm would, and returns how many.
func (p *alarmProxy) DropBlocked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if c.blocked {
			_ = c.client.Close()
			_ = c.server.Close()
			c.blocked = false
			n++
		}
	}
	return n
}

// Unblock ends the alarm: every connection still blocked is told connection.unblocked.
// It returns how many, and how many were blocked during the alarm when they published.
func (p *alarmProxy) Unblock() (n, late int) {
	p.mu.Lock()
	p.alarm, p.match = "", nil
	late, p.late = p.late, 0
	var picked []*amqpConn
	for c := range p.conns {
		if c.blocked {
			c.blocked = false
			picked = append(picked, c)
		}
	}
	p.mu.Unlock()
	for _, c := range picked {
		if c.send(testenv.AMQPUnblocked()) == nil {
			n++
		}
	}
	return n, late
}

// close stops the proxy and every connection through it.
func (p *alarmProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	for c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
}

// addAlarmProxy starts the alarm proxy of process name in front of RabbitMQ's nodes at
// targets.
func (s *System) addAlarmProxy(name string, targets ...string) (*alarmProxy, error) {
	a, err := newAlarmProxy(name, targets...)
	if err != nil {
		return nil, err
	}
	s.alarmMu.Lock()
	defer s.alarmMu.Unlock()
	if s.alarms == nil {
		s.alarms = map[string][]*alarmProxy{}
	}
	s.alarms[name] = append(s.alarms[name], a)
	return a, nil
}

// AlarmProxiesOf returns process name's alarm proxies, one per broker node (one outside
// the cluster profile), none for a process without a broker link.
func (s *System) AlarmProxiesOf(name string) []*alarmProxy {
	s.alarmMu.Lock()
	defer s.alarmMu.Unlock()
	return s.alarms[name]
}

// AlarmProxies returns every process's alarm proxies.
func (s *System) AlarmProxies() []*alarmProxy {
	s.alarmMu.Lock()
	defer s.alarmMu.Unlock()
	var out []*alarmProxy
	for _, as := range s.alarms {
		out = append(out, as...)
	}
	return out
}

func (s *System) closeAlarmProxies() {
	for _, a := range s.AlarmProxies() {
		a.close()
	}
}

// PublishConnMatch is in the connection_name of every publishing connection of the
// services (broker.NewConn(url, "<service>[-<mode>]-publish")), and of no consuming one.
const PublishConnMatch = "-publish"
