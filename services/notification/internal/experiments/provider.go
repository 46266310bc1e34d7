package experiments

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/bookstore-go/bookstore/services/notification/internal/provider"
)

// Provider is an email provider in-process that answers the two calls notification's
// client makes, as the emailprovider service does: POST /v1/emails sends an email once per
// Idempotency-Key and answers every later request of the key from its record (header
// Idempotent-Replayed: true); GET /v1/emails/{key} is the reconciliation query, 200 or
// 404. It counts what it was asked, which is what the experiment measures.
type Provider struct {
	URL string

	mu     sync.Mutex
	emails map[string]sentEmail // by idempotency key
	counts ProviderCounts
	// afterSend runs once an email is sent, before the answer leaves: where the experiment
	// holds the caller in its window.
	afterSend func(key string)
}

// sentEmail is what the Provider keeps of an email: its id and what a lookup answers.
type sentEmail struct {
	ID            string `json:"id"`
	To            string `json:"to"`
	ContentSHA256 string `json:"content_sha256"`
}

// ProviderCounts is what a Provider was asked.
type ProviderCounts struct {
	Sent          int // emails sent: the first request of each key
	Replayed      int // sends answered from the record of their key: nothing sent
	LookupsFound  int // reconciliation queries that found the email
	LookupsAbsent int // reconciliation queries that found nothing
}

// StartProvider listens on a free port of localhost until close.
func StartProvider() (p *Provider, close func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("email provider: %w", err)
	}
	p = &Provider{URL: "http://" + ln.Addr().String(), emails: map[string]sentEmail{}}
	srv := &http.Server{Handler: p}
	go func() { _ = srv.Serve(ln) }()
	return p, func() { _ = srv.Close() }, nil
}

// Counts returns what the provider was asked so far.
func (p *Provider) Counts() ProviderCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// holdAfterSend makes the next send run hold before its answer leaves.
func (p *Provider) holdAfterSend(hold func(key string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.afterSend = hold
}

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/emails":
		p.send(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/emails/"):
		p.lookup(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (p *Provider) send(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
		return
	}
	var m provider.Message
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	e, replayed := p.emails[key]
	var hold func(string)
	if replayed {
		p.counts.Replayed++
	} else {
		e = sentEmail{ID: fmt.Sprintf("email-%d", len(p.emails)+1), To: m.To, ContentSHA256: m.ContentHash()}
		p.emails[key] = e
		p.counts.Sent++
		hold, p.afterSend = p.afterSend, nil
	}
	p.mu.Unlock()
	if hold != nil {
		hold(key)
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]string{"id": e.ID})
}

func (p *Provider) lookup(w http.ResponseWriter, r *http.Request) {
	key, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/emails/"))
	if err != nil {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	e, found := p.emails[key]
	if found {
		p.counts.LookupsFound++
	} else {
		p.counts.LookupsAbsent++
	}
	p.mu.Unlock()
	if !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e)
}
