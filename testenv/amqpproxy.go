package testenv

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// NewAMQPProxy starts a Proxy to a RabbitMQ target that also reads the server's side of
// each connection as AMQP 0-9-1 frames, so that it can speak for the broker between two
// of them: BlockAMQP tells a client what a memory or disk alarm would, while the broker
// itself stays healthy for every other test.
func NewAMQPProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := NewProxy(t, target)
	p.mu.Lock()
	p.amqp = true
	p.mu.Unlock()
	return p
}

// BlockAMQP sends connection.blocked with reason to every connection whose client said
// match in its handshake (its connection_name, for example), as RabbitMQ does when an
// alarm stops it reading from publishers, and returns how many it told. Only the client
// hears it: the broker goes on as before, so a test can then cut the blocked connection
// while the broker stays reachable.
func (p *Proxy) BlockAMQP(match, reason string) int {
	return p.tellAMQP(match, AMQPBlocked(reason))
}

// UnblockAMQP sends connection.unblocked to the connections BlockAMQP would pick.
func (p *Proxy) UnblockAMQP(match string) int {
	return p.tellAMQP(match, AMQPUnblocked())
}

// CutMatching closes the connections whose client said match, and lets new ones through:
// a link that drops one connection, not an outage.
func (p *Proxy) CutMatching(match string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if bytes.Contains(l.hello, []byte(match)) {
			_ = l.client.Close()
			n++
		}
	}
	return n
}

func (p *Proxy) tellAMQP(match string, frame []byte) int {
	if !p.amqp {
		panic("testenv: BlockAMQP needs a proxy from NewAMQPProxy")
	}
	p.mu.Lock()
	var picked []*link
	for l := range p.links {
		if bytes.Contains(l.hello, []byte(match)) {
			picked = append(picked, l)
		}
	}
	p.mu.Unlock()
	n := 0
	for _, l := range picked {
		l.toClient.Lock()
		_, err := l.client.Write(frame)
		l.toClient.Unlock()
		if err == nil {
			n++
		}
	}
	return n
}

// copyFrames copies the server's frames to the client one whole frame at a time (frame
// type, channel, size, payload, end octet), holding l.toClient while it writes, and
// holds each frame while the proxy stalls l.
func (p *Proxy) copyFrames(dst, src net.Conn, l *link) {
	const header = 7
	buf := make([]byte, 0, 32*1024)
	for {
		buf = buf[:header]
		if _, err := io.ReadFull(src, buf); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(buf[3:7]))
		buf = append(buf, make([]byte, size+1)...)
		if _, err := io.ReadFull(src, buf[header:]); err != nil {
			return
		}
		p.mu.Lock()
		for p.stalls(l) {
			p.resumed.Wait()
		}
		p.mu.Unlock()
		l.toClient.Lock()
		_, err := dst.Write(buf)
		l.toClient.Unlock()
		if err != nil {
			return
		}
	}
}

// AMQPUnblocked is the frame connection.unblocked (class 10, method 61).
func AMQPUnblocked() []byte { return methodFrame(10, 61, nil) }

// AMQPBlocked is the frame connection.blocked (class 10, method 60) with its reason, a
// short string: what RabbitMQ tells a publishing connection during a memory or disk
// alarm.
func AMQPBlocked(reason string) []byte {
	reason = reason[:min(len(reason), 255)]
	return methodFrame(10, 60, append([]byte{byte(len(reason))}, reason...))
}

// methodFrame is a method frame on channel 0.
func methodFrame(class, method uint16, args []byte) []byte {
	payload := binary.BigEndian.AppendUint16(nil, class)
	payload = binary.BigEndian.AppendUint16(payload, method)
	payload = append(payload, args...)
	f := []byte{1, 0, 0} // method frame, channel 0
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	f = append(f, payload...)
	return append(f, 0xCE)
}
