// Command storefront serves one web page that lists the books, places an order with an
// Idempotency-Key, and shows the order's journey through the system live: the outbox
// row, the relay's publish, inventory's inbox and reservation, the outcome back in
// ordering, and the two-phase email; and, when the page cancels the order, the
// compensation: the cancellation, inventory's release and the second email. It reads and
// calls the services' public HTTP APIs only; it has no database and no broker connection.
//
//	storefront          the page on :8080
//	storefront --help   every environment variable and its default
package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/config"
	"github.com/bookstore-go/bookstore/services/platform/service"
	"github.com/bookstore-go/bookstore/services/storefront/internal/web"
)

func main() { service.Main("storefront", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s := service.New(service.Spec{Name: "storefront", Port: 8080}) // no database, no broker, no failpoints
	defer s.Close()
	var urls web.URLs
	var jaegerURL, sourceURL, relayPID string
	var demos bool
	var relayPause time.Duration
	s.Vars(
		config.String("ORDERING_URL", "http://127.0.0.1:8081", "base URL of ordering's API", &urls.Ordering),
		config.String("INVENTORY_URL", "http://127.0.0.1:8082", "base URL of inventory's API", &urls.Inventory),
		config.String("NOTIFICATION_URL", "http://127.0.0.1:8083", "base URL of notification's API", &urls.Notification),
		config.String("EMAILPROVIDER_URL", "http://127.0.0.1:8084", "base URL of the email provider's API", &urls.EmailProvider),
		config.String("EMAILPROVIDER_API_KEY", "", "the storefront's API key at the provider (one of its EMAILPROVIDER_API_KEYS, in notification's account); empty: the page cannot show the provider's side of an order", &urls.EmailProviderKey),
		config.String("JAEGER_URL", "", "Jaeger's UI as the browser reaches it, e.g. http://localhost:16686; empty: no trace links", &jaegerURL),
		config.String("SOURCE_URL", "https://github.com/bookstore-go/bookstore/blob/main/", "prefix of the links to the file that does each step", &sourceURL),
		config.Bool("STOREFRONT_DEMOS", "0", "1: show the break-it panel, whose buttons change the running system (the provider's faults, the relay's pause)", &demos),
		config.String("STOREFRONT_RELAY_PID", "", "with demos: the pid of an `ordering relay` process (beside ordering with ORDERING_RELAY=0), which the panel pauses with SIGSTOP and SIGCONT; checked through /proc (Linux only); empty: no pause button (make run sets it with STOREFRONT_DEMOS=1)", &relayPID),
		config.Duration("STOREFRONT_RELAY_PAUSE", "15s", "how long the panel's button pauses the relay", &relayPause),
	)
	if done, err := s.Parse(ctx, args, getenv, stdout); done {
		return err // --help or a wrong variable
	}
	if cmd := s.Command(); cmd != "" {
		return fmt.Errorf("unknown command %q (storefront takes none)", cmd)
	}
	var relay *web.RelayFreezer
	if relayPID != "" {
		pid, err := strconv.Atoi(relayPID)
		if err != nil || pid <= 1 {
			return fmt.Errorf("STOREFRONT_RELAY_PID=%q: want the pid of an `ordering relay` process, or empty", relayPID)
		}
		if demos {
			relay = web.NewRelayFreezer(pid, relayPause)
		}
	}

	tel, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	// No readiness check of its own: the services it reads are theirs to report, and a
	// page that says one of them is down is more use than a storefront out of rotation.
	s.Serve(web.NewServer(web.Options{URLs: urls, JaegerURL: jaegerURL, SourceURL: sourceURL, Demos: demos, Relay: relay}, tel))
	if relay != nil {
		// Never leave the relay stopped: a pause still running when the storefront stops
		// ends here (all but SIGKILL of the storefront come this way).
		defer func() {
			if err := relay.Thaw(); err != nil {
				s.Log.ErrorContext(ctx, "continue the relay at shutdown failed", "err", err)
			}
		}()
	}
	s.Log.InfoContext(ctx, "storefront started", "http_addr", s.Config.HTTPAddr, "ordering_url", urls.Ordering,
		"inventory_url", urls.Inventory, "notification_url", urls.Notification, "emailprovider_url", urls.EmailProvider,
		"jaeger_url", jaegerURL, "demos", demos, "relay_pid", relayPID)
	return s.Wait(ctx)
}
