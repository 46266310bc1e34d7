package harness

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// QueueInfo is what the management API says of a queue; its counts lag by up to the
// broker's statistics interval (5 s by default).
type QueueInfo struct {
	Messages int `json:"messages"`
	Ready    int `json:"messages_ready"`
	Unacked  int `json:"messages_unacknowledged"`
}

// Management is the run's broker's management API: in the cluster profile, a running
// node's.
func (s *System) Management() broker.Management { return broker.Management{URL: s.managementURL()} }

func (s *System) queuePath(queue string) string {
	return "/api/queues/" + url.PathEscape(s.Vhost) + "/" + url.PathEscape(queue)
}

// QueueState reads a queue from the management API; exists is false for a 404.
func (s *System) QueueState(ctx context.Context, queue string) (info QueueInfo, exists bool, err error) {
	err = s.Management().Do(ctx, http.MethodGet, s.queuePath(queue), "", &info)
	if errors.Is(err, broker.ErrNotFound) {
		return info, false, nil
	}
	return info, err == nil, err
}

// DeleteQueue deletes queue through the management API, messages and all (it is empty).
func (s *System) DeleteQueue(ctx context.Context, queue string) error {
	return s.Management().Do(ctx, http.MethodDelete, s.queuePath(queue), "", nil)
}

// WaitQueue waits until queue exists again, at most timeout; it returns how long that took.
func (s *System) WaitQueue(ctx context.Context, queue string, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		if _, exists, err := s.QueueState(ctx, queue); err == nil && exists {
			return time.Since(start), true
		}
		if !Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	return time.Since(start), false
}

// QueueBindings returns the routing keys queue is bound to from exchange, as the
// management API lists them (bindings are not statistics: they do not lag).
func (s *System) QueueBindings(ctx context.Context, queue, exchange string) ([]string, error) {
	var bindings []struct {
		Source     string `json:"source"`
		RoutingKey string `json:"routing_key"`
	}
	if err := s.Management().Do(ctx, http.MethodGet, s.queuePath(queue)+"/bindings", "", &bindings); err != nil {
		return nil, err
	}
	var keys []string
	for _, b := range bindings {
		if b.Source == exchange {
			keys = append(keys, b.RoutingKey)
		}
	}
	return keys, nil
}
