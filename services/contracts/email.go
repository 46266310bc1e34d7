package contracts

import (
	"crypto/sha256"
	"encoding/hex"
)

// EmailContentHash is the content_sha256 the email provider returns with an email: the
// hex SHA-256 of its subject, a line feed, and its text. A subject is one line, so the
// line feed separates the two unambiguously. The provider's reconciliation query answers
// with it, and notification compares it with the email it meant before taking the
// email it found under its key as its own.
func EmailContentHash(subject, text string) string {
	h := sha256.New()
	h.Write([]byte(subject))
	h.Write([]byte{'\n'})
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}
