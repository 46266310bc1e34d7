package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// serveEcho runs httpapi.Serve with a handler that answers each request with its method,
// path, X-Probe header and body, until the test ends, and returns its address.
func serveEcho(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q %q", r.Method, r.URL.Path, r.Header.Get("X-Probe"), b)
	})
	go func() {
		done <- httpapi.Serve(ctx, "127.0.0.1:0", httpapi.Hosts{}, echo, slog.New(slog.DiscardHandler), func(a net.Addr) { addrc <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return (<-addrc).String()
}

// exchange writes raw to a new connection to addr and reads every answer until the
// server closes it or stops answering.
func exchange(t *testing.T, addr, raw string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		// In pieces, so a line, and a CRLF, is split across reads.
		for len(raw) > 0 {
			n := min(len(raw), 7)
			if _, err := io.WriteString(c, raw[:n]); err != nil {
				return
			}
			raw = raw[n:]
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	var answers []string
	for {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return answers
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, fmt.Sprintf("%d %s", resp.StatusCode, b))
		if resp.Close {
			return answers
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	}
}

// A header section whose line ends in a bare LF, or with a header folded onto the next
// line (obs-fold, RFC 9112 §5.2), is answered 400 and its connection closed: net/http
// would take both, where a proxy in front may read them otherwise. Requests framed
// properly, pipelined, sized or chunked, pass byte for byte.
func TestALineEndedByABareLFOrAFoldedHeaderIsRefused(t *testing.T) {
	t.Parallel()
	addr := serveEcho(t)
	for name, raw := range map[string]string{
		"a bare LF in the request line": "GET /a HTTP/1.1\nHost: 127.0.0.1\r\n\r\n",
		"a bare LF after a header":      "GET /a HTTP/1.1\r\nHost: 127.0.0.1\nX-Probe: bare\r\n\r\n",
		"bare LFs throughout":           "GET /a HTTP/1.1\nHost: 127.0.0.1\n\n",
		"a folded header":               "GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Probe: a\r\n folded\r\n\r\n",
		"a header folded with a tab":    "GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Probe: a\r\n\tfolded\r\n\r\n",
		"after a good request":          "GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /a HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Probe: a\r\n b\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	} {
		answers := exchange(t, addr, raw)
		if len(answers) == 0 || !strings.HasPrefix(answers[len(answers)-1], "400 ") || strings.Contains(strings.Join(answers, "|"), "smuggled") {
			t.Errorf("%s: answered %q, want a 400 last and nothing after it", name, answers)
		}
	}

	body := strings.Repeat("x\r\n \n\t", 1000) // a body's bytes are not header lines
	raw := "POST /one HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body +
		"\r\nGET /two HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Probe: second\r\n\r\n" +
		"PUT /three HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 4\r\n\r\n\n\n\n\n" +
		"POST /four HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n\n \n\r\n0\r\n\r\n"
	want := []string{
		fmt.Sprintf(`200 POST /one "" %q`, body),
		`200 GET /two "second" ""`,
		`200 PUT /three "" "\n\n\n\n"`,
		`200 POST /four "" "\n \n"`,
	}
	if got := exchange(t, addr, raw); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("pipelined requests framed properly answered\n%q\nwant\n%q", got, want)
	}
}
