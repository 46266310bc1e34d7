// Package provider is notification's client of the email provider's HTTP API.
//
// It sorts every outcome of a call into the three cases the two-phase record needs: the
// provider has the email (Accepted, or Lookup found it), the provider refused the request
// itself (ErrRejected: no retry can fix it), or nobody knows (any other error: a timeout,
// a refused connection, a 5xx, a 409 for a send still in flight). Only the last is
// retried, and always with the same Idempotency-Key, after asking Lookup first.
package provider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// ErrRejected wraps a 4xx answer that says the request itself is wrong (400, 413, 422):
// sending it again cannot succeed.
var ErrRejected = errors.New("the email provider rejected the request")

// Message is the body of POST /v1/emails.
type Message struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// ContentHash is the content_sha256 the provider answers with the email m describes, by
// the rule its API documents: the hex SHA-256 of the subject, a line feed, and the text.
func (m Message) ContentHash() string {
	sum := sha256.Sum256([]byte(m.Subject + "\n" + m.Text))
	return hex.EncodeToString(sum[:])
}

// Accepted is the provider's answer to a send it took, or to a lookup that found an
// email. A lookup's answer also says whom the email went to and the hash of its content
// (Message.ContentHash), so the caller can tell the email it meant from another
// sent under the same key.
type Accepted struct {
	ID            string `json:"id"`
	To            string `json:"to"`
	ContentSHA256 string `json:"content_sha256"`
	Replayed      bool   `json:"-"` // the provider had the key already and sent nothing now
}

// MaxIdleConns is how many connections to the provider a Client keeps open between calls:
// as many as the sends a consumer has in flight at once (its workers, each with a batch of
// up to 16, sent concurrently), so that under load no call pays for a new connection.
const MaxIdleConns = 64

// Client calls the email provider with a timeout per call, carrying the trace context
// and the client's API key.
type Client struct {
	base     string
	apiKey   string
	timeout  time.Duration
	http     *http.Client
	duration metric.Float64Histogram
}

// New returns a client of the provider at baseURL, sending as the account of apiKey.
// Each call gives up after timeout, which is exactly the ambiguity the caller must then
// reconcile.
func New(baseURL, apiKey string, timeout time.Duration, tel *telemetry.Telemetry) (*Client, error) {
	if _, err := url.ParseRequestURI(baseURL); err != nil {
		return nil, fmt.Errorf("EMAILPROVIDER_URL=%q: %w", baseURL, err)
	}
	if apiKey == "" || strings.ContainsAny(apiKey, " \r\n") {
		return nil, errors.New("EMAILPROVIDER_API_KEY is required: the key the provider lists for this client in EMAILPROVIDER_API_KEYS")
	}
	duration, err := tel.Meter("provider").Float64Histogram("bookstore.notification.provider_duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time of each call to the email provider, by operation and result."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10))
	if err != nil {
		return nil, fmt.Errorf("provider metrics: %w", err)
	}
	// Keep a connection per concurrent send: with the default two idle connections per
	// host, a batch of sends opened a connection for every call past the second and closed
	// it after, a TCP handshake and a TIME_WAIT socket per email under load.
	pooled := http.DefaultTransport.(*http.Transport).Clone()
	pooled.MaxIdleConns, pooled.MaxIdleConnsPerHost = MaxIdleConns, MaxIdleConns
	// otelhttp's transport starts a client span per call and injects its traceparent, so
	// the provider's span joins the trace that began at POST /orders.
	transport := otelhttp.NewTransport(pooled,
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(telemetry.Propagator),
		otelhttp.WithSpanNameFormatter(func(op string, r *http.Request) string { return "emailprovider " + op }))
	return &Client{
		base:     strings.TrimSuffix(baseURL, "/"),
		apiKey:   apiKey,
		timeout:  timeout,
		http:     &http.Client{Transport: transport},
		duration: duration,
	}, nil
}

// Send posts m under key. A nil error means the provider has the email, sent now or
// before (Replayed).
func (c *Client) Send(ctx context.Context, key string, m Message) (acc Accepted, err error) {
	defer c.observe(ctx, "send", time.Now(), &err)
	body, err := json.Marshal(m)
	if err != nil {
		return Accepted{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/emails", bytes.NewReader(body))
	if err != nil {
		return Accepted{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return Accepted{}, fmt.Errorf("send email %s: %w", key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Accepted{}, fmt.Errorf("send email %s: read answer: %w", key, err)
	}
	switch resp.StatusCode {
	case http.StatusAccepted:
		if acc, err = accepted(b); err != nil {
			return Accepted{}, fmt.Errorf("send email %s: unreadable 202 answer %s: %w", key, quote(b), err)
		}
		acc.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
		return acc, nil
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return Accepted{}, fmt.Errorf("send email %s: %w: %d %s", key, ErrRejected, resp.StatusCode, quote(b))
	case http.StatusUnauthorized, http.StatusForbidden:
		// A wrong or revoked key: retried like an outage, so that the records wait (and
		// the alerts on retries fire) until an operator fixes the key, instead of every
		// email failing for good at once.
		return Accepted{}, fmt.Errorf("send email %s: provider refused our API key: %d %s", key, resp.StatusCode, quote(b))
	default: // 409 (in flight), 429, 5xx: it may yet be sent, or not; ask again later
		return Accepted{}, fmt.Errorf("send email %s: provider answered %d %s", key, resp.StatusCode, quote(b))
	}
}

// Lookup asks whether an email was sent under key: the reconciliation query.
func (c *Client) Lookup(ctx context.Context, key string) (acc Accepted, found bool, err error) {
	defer c.observe(ctx, "lookup", time.Now(), &err)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/emails/"+url.PathEscape(key), nil)
	if err != nil {
		return Accepted{}, false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return Accepted{}, false, fmt.Errorf("look up email %s: %w", key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Accepted{}, false, fmt.Errorf("look up email %s: read answer: %w", key, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if acc, err = accepted(b); err != nil {
			return Accepted{}, false, fmt.Errorf("look up email %s: unreadable answer %s: %w", key, quote(b), err)
		}
		return acc, true, nil
	case http.StatusNotFound:
		return Accepted{}, false, nil
	default:
		return Accepted{}, false, fmt.Errorf("look up email %s: provider answered %d %s", key, resp.StatusCode, quote(b))
	}
}

// accepted reads the provider's answer to a send or a lookup: a JSON object with the
// email's id, which the record keeps, so an id a database cannot store (a NUL) is as
// unreadable as none.
func accepted(b []byte) (Accepted, error) {
	var acc Accepted
	if err := json.Unmarshal(b, &acc); err != nil {
		return Accepted{}, err
	}
	if acc.ID == "" || strings.ContainsRune(acc.ID, 0) || !utf8.ValidString(acc.ID) {
		return Accepted{}, errors.New("no id, or an id that is not text")
	}
	return acc, nil
}

// maxQuoted is how much of an answer an error quotes.
const maxQuoted = 512

// quote writes an answer's body into an error: quoted, so a NUL or invalid UTF-8 in it
// cannot make the error unstorable where the record keeps it as last_error, and cut
// after maxQuoted bytes.
func quote(b []byte) string {
	if len(b) <= maxQuoted {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(string(b[:maxQuoted])), len(b))
}

func (c *Client) observe(ctx context.Context, op string, start time.Time, err *error) {
	result := "ok"
	if *err != nil {
		result = "error"
	}
	c.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
		attribute.String("operation", op), attribute.String("result", result)))
}
