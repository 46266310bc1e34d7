package emails

import (
	"bytes"
	"mime"
	"net/mail"
	"strings"
	"testing"
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
