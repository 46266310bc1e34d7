package httpapi

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// chunkedConn is a net.Conn whose reads return what it holds a few bytes at a time.
type chunkedConn struct {
	net.Conn
	r     *bytes.Reader
	chunk int
}

func (c *chunkedConn) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.chunk)])
}

// Whatever a client sends, the server reads it through strictConn either as it was sent,
// or cut where a line was refused and ended with the refusal, then EOF: nothing is
// added, reordered or read twice, whatever the reads' sizes.
func FuzzAStrictConnPassesTheBytesOrCutsThemAtARefusal(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n\n\n\nGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\n\r\n0\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nContent-Length: x\r\n\r\n\n",
	} {
		f.Add([]byte(seed), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		c := &strictConn{Conn: &chunkedConn{r: bytes.NewReader(in), chunk: int(chunk%16) + 1}}
		out, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(out, in) {
			return
		}
		cut, ok := bytes.CutSuffix(out, refusal)
		if !ok || !bytes.HasPrefix(in, cut) {
			t.Fatalf("%q read as %q: neither as sent nor cut at a refusal", in, out)
		}
	})
}
