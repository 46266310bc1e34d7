package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
)

// Forwarding to an SMTP server (Mailpit in docker compose): each sent email once.

// smtpServer is a minimal SMTP server standing in for Mailpit: it accepts one message per
// connection and hands over what arrived after DATA.
func smtpServer(t *testing.T) (addr string, messages <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan string, 10)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				fmt.Fprint(conn, "220 test ESMTP\r\n")
				var data strings.Builder
				inData := false
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch {
					case inData && line == ".\r\n":
						inData = false
						out <- data.String()
						fmt.Fprint(conn, "250 queued\r\n")
					case inData:
						data.WriteString(line)
					case strings.HasPrefix(line, "DATA"):
						inData = true
						fmt.Fprint(conn, "354 go ahead\r\n")
					case strings.HasPrefix(line, "QUIT"):
						fmt.Fprint(conn, "221 bye\r\n")
						return
					default: // EHLO, MAIL, RCPT
						fmt.Fprint(conn, "250 ok\r\n")
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), out
}

func TestSentEmailsAreForwardedOnceOverSMTP(t *testing.T) {
	t.Parallel()
	t.Run("forwards each sent email once", func(t *testing.T) {
		t.Parallel()
		addr, messages := smtpServer(t)
		p := start(t, "SMTP_ADDR", addr)
		body := emailBody("mel@example.com", "Order 42 confirmed")
		wantStatus(t, "send", p.must(t, http.MethodPost, "/v1/emails", "smtp-1", body), http.StatusAccepted)
		wantStatus(t, "replay", p.must(t, http.MethodPost, "/v1/emails", "smtp-1", body), http.StatusAccepted)
		select {
		case m := <-messages:
			if !strings.Contains(m, "To: mel@example.com") || !strings.Contains(m, "Subject: Order 42 confirmed") || !strings.Contains(m, "X-Idempotency-Key: smtp-1") {
				t.Fatalf("forwarded message:\n%s", m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("nothing was forwarded")
		}
		select {
		case m := <-messages:
			t.Fatalf("the replay was forwarded again:\n%s", m)
		case <-time.After(300 * time.Millisecond):
		}
	})
	t.Run("a failure to forward keeps the record", func(t *testing.T) {
		t.Parallel()
		p := start(t, "SMTP_ADDR", testenv.FreeAddr(t)) // nothing listens there
		wantStatus(t, "send", p.must(t, http.MethodPost, "/v1/emails", "smtp-2", emailBody("nell@example.com", "s")), http.StatusAccepted)
		if list := p.list(t, "nell@example.com"); len(list) != 1 || list[0].Deliveries != 1 {
			t.Fatalf("list = %+v, want the email recorded once", list)
		}
		metrics := string(p.must(t, http.MethodGet, "/metrics", "", "").body)
		if !strings.Contains(metrics, "bookstore_emailprovider_smtp_failures_total 1") {
			t.Fatalf("metrics do not count the failure to forward:\n%s", grep(metrics, "bookstore_"))
		}
	})
}

func grep(text, substr string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
