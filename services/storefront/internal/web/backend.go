package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// URLs are the base URLs of the services' public HTTP APIs, the only thing the
// storefront reads: it has no database and no broker connection.
type URLs struct {
	Ordering, Inventory, Notification, EmailProvider string
	// EmailProviderKey is the storefront's API key at the provider, of the account
	// notification sends for: the provider answers only its callers, and each account
	// sees only its own emails.
	EmailProviderKey string
}

// backend calls the services' APIs. Every call is a client span whose traceparent the
// service continues, so an order placed here is one trace from the click to the email.
type backend struct {
	urls URLs
	http *http.Client
}

func newBackend(urls URLs, tel *telemetry.Telemetry) *backend {
	transport := otelhttp.NewTransport(http.DefaultTransport,
		otelhttp.WithTracerProvider(tel.TracerProvider),
		otelhttp.WithMeterProvider(tel.MeterProvider),
		otelhttp.WithPropagators(telemetry.Propagator),
		otelhttp.WithSpanNameFormatter(func(op string, r *http.Request) string { return r.Method + " " + r.URL.Host }))
	return &backend{urls: urls, http: &http.Client{Transport: transport, Timeout: 10 * time.Second}}
}

// errNotFound is a 404 from a service: the step it would show has not happened yet.
var errNotFound = errors.New("not found")

// statusError is any other answer than the one expected.
type statusError struct {
	Status int
	Body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.Status, e.Body) }

// do sends a request and decodes a 2xx JSON answer into out. It returns the response's
// status and headers.
func (b *backend) do(ctx context.Context, method, url string, header http.Header, body, out any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if b.urls.EmailProviderKey != "" && strings.HasPrefix(url, b.urls.EmailProvider+"/") {
		req.Header.Set("Authorization", "Bearer "+b.urls.EmailProviderKey)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return resp, errNotFound
	case resp.StatusCode >= 300:
		return resp, &statusError{Status: resp.StatusCode, Body: string(data)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("%s %s: decode: %w", method, url, err)
		}
	}
	return resp, nil
}

func (b *backend) get(ctx context.Context, url string, out any) error {
	_, err := b.do(ctx, http.MethodGet, url, nil, nil, out)
	return err
}

// Book is one book of inventory's GET /books.
type Book struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	OnHand    int    `json:"on_hand"`
	Reserved  int    `json:"reserved"`
	Available int    `json:"available"`
}

// maxBooks bounds what the page lists: the catalogue may hold 10,000 books
// (contracts.MaxBooks), more than one page should show.
const maxBooks = 1000

// books reads the catalogue, following the Link rel="next" of each page.
func (b *backend) books(ctx context.Context) ([]Book, error) {
	next, err := url.Parse(b.urls.Inventory + "/books?limit=100")
	if err != nil {
		return nil, fmt.Errorf("INVENTORY_URL: %w", err)
	}
	var all []Book
	for next != nil && len(all) < maxBooks {
		var page []Book
		resp, err := b.do(ctx, http.MethodGet, next.String(), nil, nil, &page)
		if err != nil {
			return nil, fmt.Errorf("GET /books: %w", err)
		}
		all = append(all, page...)
		if next, err = httpapi.NextPageURL(next, resp.Header); err != nil {
			return nil, fmt.Errorf("GET /books: %w", err)
		}
	}
	return all, nil
}

// Line is one line of an order.
type Line struct {
	BookID   string `json:"book_id"`
	Quantity int    `json:"quantity"`
}

// Order is ordering's order.
type Order struct {
	ID            string    `json:"id"`
	CustomerEmail string    `json:"customer_email"`
	Status        string    `json:"status"`
	Lines         []Line    `json:"lines"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// History is what happened to the order, oldest first: placed, then confirmed or
	// rejected, then cancelled and released.
	History []HistoryEntry `json:"history"`
}

// HistoryEntry is one event of an order's history.
type HistoryEntry struct {
	Event string    `json:"event"`
	At    time.Time `json:"at"`
}

// placeOrder sends POST /orders with the key. The same key sent again while the first
// request is still in its transaction is answered 409 by ordering; it is the same order,
// so it asks again until ordering replays the first answer.
func (b *backend) placeOrder(ctx context.Context, key string, email string, lines []Line) (Order, bool, error) {
	h := http.Header{"Idempotency-Key": {key}}
	body := map[string]any{"customer_email": email, "lines": lines}
	for attempt := 0; ; attempt++ {
		var o Order
		resp, err := b.do(ctx, http.MethodPost, b.urls.Ordering+"/orders", h, body, &o)
		var se *statusError
		if errors.As(err, &se) && se.Status == http.StatusConflict && attempt < 50 {
			select {
			case <-ctx.Done():
				return Order{}, false, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return Order{}, false, err
		}
		return o, resp.Header.Get("Idempotent-Replayed") == "true", nil
	}
}

// cancelKey is the Idempotency-Key of the storefront's cancellation of an order: one per
// order, so a double click, a retry and a second browser are all the same cancellation,
// and ordering answers them with its first answer.
func cancelKey(orderID string) string { return "storefront-cancel/" + orderID }

// cancelOrder sends POST /orders/{id}/cancel with the order's cancel key. As for a
// placement, the same key while the first request is still in its transaction is
// answered 409 idempotency-key-in-flight; it asks again until ordering replays the first
// answer. Any other 409 (not-cancellable) is returned as it is.
func (b *backend) cancelOrder(ctx context.Context, id string) (Order, bool, error) {
	h := http.Header{"Idempotency-Key": {cancelKey(id)}}
	for attempt := 0; ; attempt++ {
		var o Order
		resp, err := b.do(ctx, http.MethodPost, b.urls.Ordering+"/orders/"+url.PathEscape(id)+"/cancel", h, struct{}{}, &o)
		var se *statusError
		if errors.As(err, &se) && se.Status == http.StatusConflict && strings.Contains(se.Body, "idempotency-key-in-flight") && attempt < 50 {
			select {
			case <-ctx.Done():
				return Order{}, false, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return Order{}, false, err
		}
		return o, resp.Header.Get("Idempotent-Replayed") == "true", nil
	}
}

// OutboxEvent is one item of ordering's GET /orders/{id}/events and of inventory's
// reservation events.
type OutboxEvent struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	TraceID     string     `json:"trace_id"`
	CreatedAt   time.Time  `json:"created_at"`
	PublishedAt *time.Time `json:"published_at"`
}

// Reservation is inventory's GET /orders/{id}/reservation.
type Reservation struct {
	Outcome    string        `json:"outcome"`
	AnsweredAt time.Time     `json:"answered_at"`
	Lines      []Line        `json:"lines"`
	Events     []OutboxEvent `json:"events"`
}

// Notification is one record of notification's GET /notifications?order_id=.
type Notification struct {
	Kind           string    `json:"kind"`
	Status         string    `json:"status"`
	IdempotencyKey string    `json:"idempotency_key"`
	Attempts       int       `json:"attempts"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Email is the provider's GET /v1/emails/{key}.
type Email struct {
	To         string    `json:"to"`
	Subject    string    `json:"subject"`
	Deliveries int       `json:"deliveries"`
	CreatedAt  time.Time `json:"created_at"`
}

// Faults are the provider's faults in force (GET and PUT /admin/faults).
type Faults struct {
	FailRate      float64 `json:"fail_rate"`
	AmbiguousRate float64 `json:"ambiguous_rate"`
	Latency       string  `json:"latency"`
}

func (b *backend) faults(ctx context.Context) (Faults, error) {
	var f Faults
	err := b.get(ctx, b.urls.EmailProvider+"/admin/faults", &f)
	return f, err
}

func (b *backend) setFaults(ctx context.Context, f Faults) (Faults, error) {
	var out Faults
	_, err := b.do(ctx, http.MethodPut, b.urls.EmailProvider+"/admin/faults", nil, f, &out)
	return out, err
}

// emailURL is the provider's reconciliation query for a key, which may hold slashes.
func (b *backend) emailURL(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return b.urls.EmailProvider + "/v1/emails/" + strings.Join(parts, "/")
}
