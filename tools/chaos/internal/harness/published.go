package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Published reads bookstore_outbox_published_total from p's /metrics: how many events
// its relay has published since the process started.
func Published(ctx context.Context, p *Process) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return sumMetric(bufio.NewScanner(resp.Body), "bookstore_outbox_published_total")
}

// Readyz returns p's /readyz status and the start of its body (what it says is not
// ready); status 0 when it did not answer.
func Readyz(ctx context.Context, p *Process) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr+"/readyz", nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}
