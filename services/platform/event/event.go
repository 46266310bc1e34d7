// Package event is the wire format of events: a CloudEvents 1.0 envelope in structured
// JSON mode. The event types and their data are the system's (Bookstore's are in
// services/contracts); the envelope carries any of them.
//
// It closes the "poison message" failure: Decode sorts every delivery into a valid event
// or a *PoisonError that says why the message can never succeed, so a consumer can
// dead-letter it at once instead of redelivering it forever.
package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/strictjson"
)

// ContentType is the AMQP content type of every event body.
const ContentType = "application/cloudevents+json"

// Envelope is a CloudEvents 1.0 event. Data stays raw so that the bytes a producer wrote
// into its outbox are the bytes every consumer hashes.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject"`
	Time            time.Time       `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	Sequence        string          `json:"sequence"`
	TraceParent     string          `json:"traceparent,omitempty"`
	TraceState      string          `json:"tracestate,omitempty"`
	Data            json.RawMessage `json:"data"`
}

// New builds an envelope with a fresh UUIDv7 id. Call it exactly once per event, when the
// outbox row is written: the id is what every consumer deduplicates on, so a relay that
// publishes the row again must reuse it, never make a new one.
func New(source, typ, subject string, sequence int64, data any) (Envelope, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Envelope{}, fmt.Errorf("event id: %w", err)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return Envelope{}, fmt.Errorf("event data: %w", err)
	}
	return Envelope{
		SpecVersion:     "1.0",
		ID:              id.String(),
		Source:          source,
		Type:            typ,
		Subject:         subject,
		Time:            time.Now().UTC().Truncate(time.Microsecond),
		DataContentType: "application/json",
		Sequence:        strconv.FormatInt(sequence, 10),
		Data:            raw,
	}, nil
}

// Poison reasons: the label of the poison metric.
const (
	ReasonNotJSON         = "not-json"
	ReasonInvalidEnvelope = "invalid-envelope"
	ReasonUnknownType     = "unknown-type"
	ReasonInvalidData     = "invalid-data"
	ReasonContentMismatch = "id-reused-with-different-content"
	// ReasonTooLarge: the message is larger than the consumer reads (consumer.Config's
	// MaxMessageSize); it is refused before a byte of it is decoded.
	ReasonTooLarge = "too-large"
	// ReasonContentType: the message's AMQP content type is not ContentType; its bytes
	// are not read as an event whatever they hold.
	ReasonContentType = "content-type"
	// ReasonProducer: the message's AMQP user-id, which the broker checks against the
	// publisher's login, is not the producer the consumer takes the queue's events from
	// (or is missing); its bytes are not read.
	ReasonProducer = "producer"
	// ReasonRoutingKey: the message was routed under a key other than its envelope's
	// type, so the topic permission the broker checked on the key was not the type's.
	ReasonRoutingKey = "routing-key"
)

// PoisonError marks a message that can never succeed, whatever the retry.
type PoisonError struct {
	Reason string
	Err    error
}

// Error says why, in at most about MaxDetail bytes of the cause: the cause may quote
// the message (a type, a field name, an id), and the message is whatever a publisher
// sent, so the log line and the span event that carry it stay bounded.
func (e *PoisonError) Error() string {
	return "poison message (" + e.Reason + "): " + cut(e.Err.Error(), MaxDetail)
}

// MaxDetail is the most bytes of a poison error's cause that Error keeps.
const MaxDetail = 512

// maxQuoted is the most bytes of one value that Truncate keeps.
const maxQuoted = 64

// Truncate quotes s for an error message, at most its first 64 bytes followed by how long
// it was: a value from a message quoted whole could be the whole message.
func Truncate(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s, maxQuoted)) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// cut returns s's first n bytes at most, not splitting a UTF-8 character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// IsContentType reports whether an AMQP content type is ContentType, the events' (its
// case and a charset=utf-8 parameter aside).
func IsContentType(contentType string) bool {
	t, params, err := mime.ParseMediaType(contentType)
	if err != nil || t != ContentType {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}
func (e *PoisonError) Unwrap() error { return e.Err }

// Poison wraps err as a poison message with the given reason.
func Poison(reason string, err error) error { return &PoisonError{Reason: reason, Err: err} }

// IsPoison reports whether err is, or wraps, a *PoisonError, and its reason.
func IsPoison(err error) (string, bool) {
	var p *PoisonError
	if errors.As(err, &p) {
		return p.Reason, true
	}
	return "", false
}

// Decode parses and validates a message body. Every error it returns is a *PoisonError.
// known lists the types the caller can handle; any other type is poison.
func Decode(body []byte, known ...string) (Envelope, error) {
	var e Envelope
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&e); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(body) {
			return e, Poison(ReasonNotJSON, err)
		}
		return e, Poison(ReasonInvalidEnvelope, err)
	}
	// dec.More is not enough: it reports a stray ] or } after the object as no more.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return e, Poison(ReasonNotJSON, errors.New("trailing data after the event"))
	}
	if err := e.validate(); err != nil {
		return e, Poison(ReasonInvalidEnvelope, err)
	}
	for _, k := range known {
		if e.Type == k {
			return e, nil
		}
	}
	return e, Poison(ReasonUnknownType, fmt.Errorf("type %s is not one of %v", Truncate(e.Type), known))
}

func (e Envelope) validate() error {
	switch {
	case e.SpecVersion != "1.0":
		return fmt.Errorf("specversion %s, want 1.0", Truncate(e.SpecVersion))
	case e.Source == "":
		return errors.New("source is empty")
	case e.Type == "":
		return errors.New("type is empty")
	case e.Subject == "":
		return errors.New("subject is empty")
	case len(e.Data) == 0 || bytes.Equal(e.Data, []byte("null")):
		return errors.New("data is missing")
	}
	for _, f := range []struct{ name, value string }{
		{"specversion", e.SpecVersion}, {"id", e.ID}, {"source", e.Source}, {"type", e.Type},
		{"subject", e.Subject}, {"datacontenttype", e.DataContentType}, {"sequence", e.Sequence},
		{"traceparent", e.TraceParent}, {"tracestate", e.TraceState},
	} {
		// A NUL is text no database stores: a consumer that kept it would fail on every
		// redelivery instead of dead-lettering the message once.
		if strings.ContainsRune(f.value, 0) {
			return fmt.Errorf("%s holds a NUL character", f.name)
		}
	}
	id, err := uuid.Parse(e.ID)
	if err != nil {
		return fmt.Errorf("id %s is not a UUID", Truncate(e.ID))
	}
	if id.String() != e.ID {
		return fmt.Errorf("id %s is not in canonical form", Truncate(e.ID))
	}
	// Canonical only ("1", not "01" or "+1"): the sequence is part of the content hash.
	if n, err := strconv.ParseInt(e.Sequence, 10, 64); err != nil || n < 1 || strconv.FormatInt(n, 10) != e.Sequence {
		return fmt.Errorf("sequence %s is not a positive decimal", Truncate(e.Sequence))
	}
	return nil
}

// UUID returns the envelope's id; Decode has checked that it parses.
func (e Envelope) UUID() uuid.UUID { return uuid.MustParse(e.ID) }

// DecodeData unmarshals the data strictly: unknown fields are poison, since a producer
// that sends them speaks a version this consumer does not know. So is a key spelled in
// another case than the field's ("Order_ID") or given twice, both of which encoding/json
// alone would read silently (matching keys whatever their case, keeping the last of two).
func (e Envelope) DecodeData(v any) error {
	dec := json.NewDecoder(bytes.NewReader(e.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Poison(ReasonInvalidData, fmt.Errorf("%s data: %w", e.Type, err))
	}
	if err := strictjson.CheckKeys(e.Data, reflect.TypeOf(v)); err != nil {
		return Poison(ReasonInvalidData, fmt.Errorf("%s data: %w", e.Type, err))
	}
	return nil
}

// ContentHash fingerprints what an event means (type, source, subject, sequence and the
// compacted data), not how it was framed: the time and trace context may differ between
// two publishes of the same outbox row, and a reformatted body is still the same event.
// Two messages with one id and different hashes are a producer bug: poison.
func (e Envelope) ContentHash() []byte {
	var data bytes.Buffer
	if err := json.Compact(&data, e.Data); err != nil {
		data.Reset()
		data.Write(e.Data)
	}
	h := sha256.New()
	for _, part := range []string{e.Type, e.Source, e.Subject, e.Sequence} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write(data.Bytes())
	return h.Sum(nil)
}
