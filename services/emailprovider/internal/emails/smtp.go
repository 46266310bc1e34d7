package emails

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"time"
	"unicode/utf8"
)

// SMTPForwarder passes every sent email on to an SMTP server, such as Mailpit in docker
// compose, so a reader can see the emails in a browser. It uses no authentication or TLS:
// it is meant for a local catch-all server only.
type SMTPForwarder struct {
	Addr    string // host:port
	From    string
	Timeout time.Duration // for the whole conversation
}

// Forward sends one email over SMTP.
func (r SMTPForwarder) Forward(ctx context.Context, key string, req Request) error {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.Addr)
	if err != nil {
		return fmt.Errorf("smtp dial %s: %w", r.Addr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	host, _, _ := net.SplitHostPort(r.Addr)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("smtp hello: %w", err)
	}
	defer c.Close()
	if err := c.Mail(r.From); err != nil {
		return fmt.Errorf("smtp mail from: %w", err)
	}
	if err := c.Rcpt(req.To); err != nil {
		return fmt.Errorf("smtp rcpt to: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp data: %w", err)
	}
	if _, err := w.Write(message(r.From, key, req)); err != nil {
		return fmt.Errorf("smtp write: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp end of data: %w", err)
	}
	return c.Quit()
}

// message renders the email in RFC 5322 form. Request.Valid has refused a subject with a
// line break, so no header can be injected through it.
func message(from, key string, req Request) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\n", from)
	fmt.Fprintf(&b, "To: %s\r\n", req.To)
	fmt.Fprintf(&b, "Subject: %s\r\n", encodeHeader(req.Subject))
	fmt.Fprintf(&b, "Date: %s\r\n", time.Now().UTC().Format(time.RFC1123Z))
	fmt.Fprintf(&b, "X-Idempotency-Key: %s\r\n", strings.NewReplacer("\r", "", "\n", "").Replace(key))
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n")
	b.WriteString(crlf(req.Text))
	b.WriteString("\r\n")
	return []byte(b.String())
}

// lineEnds are the line ends a text may hold: CRLF first, so that it stays one.
var lineEnds = strings.NewReplacer("\r\n", "\r\n", "\r", "\r\n", "\n", "\r\n")

// crlf returns text with every line end (CRLF, a bare CR, a bare LF) written as CRLF,
// the only line end SMTP has. A bare CR or LF passed on would be a line end to some
// servers and not to others; "\r.\r\n" then ends DATA at a lenient server while the
// sender's dot-stuffing, which looks only after CRLF, lets it through, and the rest of
// the text is read as commands (SMTP smuggling). Once every line end is CRLF, the
// DATA writer of net/smtp stuffs every line that starts with a dot, and no text can
// hold the end marker.
func crlf(text string) string { return lineEnds.Replace(text) }

// encodeHeader returns v as a header value that is ASCII and reads back as v. Printable
// ASCII without "=?" is written as it is. Anything else is RFC 2047 encoded, or a mail
// client shows mojibake and a strict server refuses the message; and so is ASCII that
// holds "=?", which a client would otherwise decode as an encoded word the sender never
// wrote. mime.BEncoding would pass that through, so the words are made here: base64 of at
// most 45 bytes of whole characters each (72 characters a word, under RFC 2047's 75),
// one per line, since the longest subject encodes to more than a line may hold and the
// folding between encoded words is dropped when read.
func encodeHeader(v string) string {
	plain := !strings.Contains(v, "=?")
	for i := 0; i < len(v) && plain; i++ {
		plain = v[i] >= 0x20 && v[i] < 0x7f
	}
	if plain {
		return v
	}
	var words []string
	for len(v) > 0 {
		n := 0
		for n < len(v) {
			_, size := utf8.DecodeRuneInString(v[n:])
			if n+size > 45 {
				break
			}
			n += size
		}
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(v[:n]))+"?=")
		v = v[n:]
	}
	return strings.Join(words, "\r\n ")
}
