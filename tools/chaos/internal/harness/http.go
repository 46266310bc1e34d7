package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// The API keys at the email provider, both of account bookstore: notification's, and the
// harness's own, with which it reads what was sent and sets the faults. Every request
// the harness sends carries ReaderProviderKey; the other services ignore it.
const (
	NotificationProviderKey = "chaos-notification-key-0123456789abcd"
	ReaderProviderKey       = "chaos-reader-key-0123456789abcdef0123"
)

// ProviderAccount is the provider's account both keys send and read for.
const ProviderAccount = "bookstore"

// ProviderAPIKeys is the provider's EMAILPROVIDER_API_KEYS in a chaos run.
const ProviderAPIKeys = ProviderAccount + ":" + NotificationProviderKey + ":send,read," + ProviderAccount + ":" + ReaderProviderKey + ":read,admin"

// getJSON GETs u and decodes its JSON answer into out.
func getJSON(ctx context.Context, u string, out any) error {
	_, err := getJSONHeader(ctx, u, out)
	return err
}

// getJSONHeader is getJSON that also returns the response's header (its Link, for GetAll).
func getJSONHeader(ctx context.Context, u string, out any) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+ReaderProviderKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return resp.Header, json.NewDecoder(resp.Body).Decode(out)
}

// PutJSON PUTs in as JSON to u and fails on any status from 300 up.
func PutJSON(ctx context.Context, u string, in any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ReaderProviderKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("PUT %s: %s", u, resp.Status)
	}
	return nil
}

// GetAll reads a whole list of the contracts' APIs (GET /books, /notifications,
// /v1/emails): the pages of MaxPageLimit items, one after another, following each next
// link until the last page, which has none. A list is never cut: the checker must see
// every book and every email, or it would miss a double send on page two.
func GetAll[T any](ctx context.Context, u string) ([]T, error) {
	next, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	q := next.Query()
	q.Set(httpapi.LimitParam, fmt.Sprint(httpapi.MaxPageLimit))
	next.RawQuery = q.Encode()
	var all []T
	for pages := 0; next != nil; pages++ {
		if pages > 10_000 {
			return nil, fmt.Errorf("GET %s: more than 10,000 pages; is the next link going round in circles?", u)
		}
		var page []T
		header, err := getPage(ctx, next.String(), &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next, err = httpapi.NextPageURL(next, header); err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
	}
	return all, nil
}

// getPage reads one page, asking again a few times over about 20 s when the answer is an
// error: the checker reads after the faults have healed, but the machine's Postgres is
// shared, and a service may be refused a connection for a moment ("too many clients")
// and answer 500. A list the checker cannot read is the run's error, not a verdict.
func getPage(ctx context.Context, u string, out any) (header map[string][]string, err error) {
	wait := 250 * time.Millisecond
	for try := 0; ; try++ {
		h, err := getJSONHeader(ctx, u, out)
		if err == nil || try == 7 || !Sleep(ctx, wait) {
			return h, err
		}
		wait = min(2*wait, 4*time.Second)
	}
}
