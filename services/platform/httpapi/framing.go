package httpapi

import (
	"bytes"
	"io"
	"net"
	"strconv"
)

// strictConn is a server's connection whose requests' header sections are checked as
// net/http reads them. net/http takes a line ended by a bare LF and a header folded onto
// the next line (obs-fold), both of which RFC 9112 lets a server refuse and a proxy in
// front may read otherwise, so that the two disagree on where a request's headers end
// or what they say. At either, strictConn ends what the server reads with a line holding
// a NUL, which net/http answers 400 before it closes the connection, and then with EOF.
//
// It follows each request's framing to tell header lines from body bytes: a
// Content-Length's bytes pass unread; after a Transfer-Encoding, a Content-Length it
// cannot read, or a header section over MaxHeaderBytes it stops checking, since net/http
// closes that connection after its answer (closeAfterTransferCoding) or refuses the
// request.
type strictConn struct {
	net.Conn

	state   framingState
	header  []byte // the header section being read, for its framing
	body    int64  // bytes of the body still to pass
	pending []byte // what ends the stream, once a line was refused
	ended   bool   // the stream was ended: only pending, then EOF, is read
}

type framingState int

const (
	betweenRequests framingState = iota // before a request line (empty lines pass)
	inHeader                            // in a header section
	inBody                              // in a sized body
	unchecked                           // no longer checked
)

// refusal ends the stream where a line was refused: a NUL on the line, then the end of
// the header section, so net/http answers at once.
var refusal = []byte("\x00\r\n\r\n")

func (c *strictConn) Read(p []byte) (int, error) {
	if c.ended {
		if len(c.pending) == 0 {
			return 0, io.EOF
		}
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if c.state == unchecked {
		return n, err
	}
	for i := 0; i < n; i++ {
		switch c.state {
		case unchecked:
			return n, err
		case inBody:
			skip := min(c.body, int64(n-i))
			c.body -= skip
			i += int(skip) - 1
			if c.body == 0 {
				c.state = betweenRequests
			}
			continue
		case betweenRequests:
			if p[i] == '\r' || p[i] == '\n' {
				continue
			}
			c.state, c.header = inHeader, c.header[:0]
		}
		b := p[i]
		switch {
		case b == '\n' && !bytes.HasSuffix(c.header, []byte("\r")):
			return c.end(p, i), nil // a bare LF
		case (b == ' ' || b == '\t') && bytes.HasSuffix(c.header, []byte("\r\n")):
			return c.end(p, i), nil // obs-fold: a line that goes on the one before
		}
		c.header = append(c.header, b)
		if len(c.header) > MaxHeaderBytes+4096 {
			c.state = unchecked // net/http refuses it: 431
			continue
		}
		if b == '\n' && bytes.HasSuffix(c.header, []byte("\r\n\r\n")) {
			c.state, c.body = c.framing()
			if cap(c.header) > 4<<10 {
				c.header = nil // an idle connection keeps no large header's buffer
			}
			if c.state == inBody && c.body == 0 {
				c.state = betweenRequests
			}
		}
	}
	return n, err
}

// end cuts what was read at i, where a line was refused, and ends the stream there.
func (c *strictConn) end(p []byte, i int) int {
	c.ended = true
	c.pending = append(c.pending[:0], refusal...)
	n := copy(p[i:], c.pending)
	c.pending = c.pending[n:]
	return i + n
}

// framing reads the header section just ended: the state after it, and a body's length.
func (c *strictConn) framing() (framingState, int64) {
	var length int64
	seen := false
	for _, line := range bytes.Split(c.header, []byte("\r\n"))[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Transfer-Encoding")):
			return unchecked, 0
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")):
			n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || n < 0 || (seen && n != length) {
				return unchecked, 0
			}
			length, seen = n, true
		}
	}
	return inBody, length
}

// CloseWrite half-closes the connection when it can, as net/http does before closing a
// connection it answered, so the client reads the answer rather than a reset.
func (c *strictConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
