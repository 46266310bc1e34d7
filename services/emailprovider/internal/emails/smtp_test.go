package emails

import (
	"bufio"
	"bytes"
	"fmt"
	"mime"
	"net"
	"net/mail"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSubjectIsWrittenAsASCIIAndReadBackAsSent(t *testing.T) {
	t.Parallel()
	for _, subject := range []string{
		"Order 42 confirmed",
		"Siparişiniz onaylandı",
		"=?utf-8?q?looks_encoded?= but is not",
		strings.Repeat("ğ", MaxSubjectLen/2), // the longest subject Valid takes, all of it two-byte
	} {
		raw := message("bookstore@example.com", "k", Request{To: "ada@example.com", Subject: subject, Text: "t"})
		header, _, _ := bytes.Cut(raw, []byte("\r\n\r\n"))
		for _, line := range bytes.Split(header, []byte("\r\n")) {
			if len(line) > 998 {
				t.Errorf("%.20q: a header line of %d bytes; RFC 5322 allows 998", subject, len(line))
			}
			for _, c := range line {
				if c >= 0x80 {
					t.Fatalf("%.20q: a header holds a non-ASCII byte: %.80q", subject, line)
				}
			}
		}
		msg, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%.20q: %v", subject, err)
		}
		got, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
		if err != nil || got != subject {
			t.Errorf("subject read back as %.40q (%v), want %.40q", got, err, subject)
		}
	}
}

// dataServer is a loopback SMTP server that takes one message per connection and hands
// over the bytes that arrived between DATA's 354 and the end marker, exactly as sent.
func dataServer(t *testing.T) (addr string, data <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan []byte, 1)
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
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch {
					case strings.HasPrefix(line, "DATA"):
						fmt.Fprint(conn, "354 go ahead\r\n")
						var raw []byte
						for !bytes.HasSuffix(raw, []byte("\r\n.\r\n")) {
							b, err := r.ReadByte()
							if err != nil {
								return
							}
							raw = append(raw, b)
						}
						out <- raw
						fmt.Fprint(conn, "250 queued\r\n")
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

// A text holding the SMTP smuggling sequences (a lone dot between bare CRs or LFs) cannot
// end DATA early, not even at a server that takes a bare CR or a bare LF as a line end:
// every line end reaches DATA as CRLF, and a line that starts with a dot is stuffed.
func TestATextCannotEndSMTPDataEarly(t *testing.T) {
	t.Parallel()
	addr, data := dataServer(t)
	const smuggled = "MAIL FROM:<eve@example.com>\r\nRCPT TO:<ada@example.com>\r\nDATA\r\nFrom: bank\r\n\r\nsmuggled"
	text := "hello\r.\r\n" + smuggled + "\n.\n" + smuggled + "\r\n.\r" + smuggled + "\n.\r\n" + smuggled + "\r.\n" + smuggled + "\r\r.\r\r" + "bye"
	forward := SMTPForwarder{Addr: addr, From: "bookstore@example.com", Timeout: 10 * time.Second}
	if err := forward.Forward(t.Context(), "order/1/order-confirmed", Request{To: "ada@example.com", Subject: "s", Text: text}); err != nil {
		t.Fatal(err)
	}
	raw := <-data
	// What a lenient server reads: any of CRLF, CR or LF ends a line.
	lines := regexp.MustCompile("\r\n|\r|\n").Split(string(raw), -1)
	for i, line := range lines[:len(lines)-2] { // the last two: the end marker and after it
		if line == "." {
			t.Fatalf("line %d of DATA is a lone dot: a lenient server ends the message there and reads the rest as commands\n%q", i, raw)
		}
	}
	if bare := regexp.MustCompile("\r[^\n]|[^\r]\n|\r$").FindStringIndex(string(raw)); bare != nil {
		t.Fatalf("a bare CR or LF at byte %d of DATA: %q", bare[0], raw[max(bare[0]-20, 0):min(bare[1]+20, len(raw))])
	}
	// The text reads back whole, its line ends made CRLF.
	_, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	body = strings.TrimSuffix(strings.ReplaceAll(body, "\r\n..", "\r\n."), "\r\n.\r\n")
	if want := regexp.MustCompile("\r\n|\r|\n").ReplaceAllString(text, "\r\n"); body != want {
		t.Fatalf("the text arrived as\n%q\nwant\n%q", body, want)
	}
}
