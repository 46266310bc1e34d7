package wrongways

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/backoff"
	"github.com/bookstore-go/bookstore/services/platform/outbox"
	"github.com/bookstore-go/bookstore/services/platform/wrongways/internal/wrongstore"
)

// Relay is what a service runs as its outbox relay: an *outbox.Relay, or a wrong way
// around one.
type Relay interface {
	Run(ctx context.Context) error
	Ready(ctx context.Context) error
}

// RelayingTwin runs relay, which relays under id, and while relay refuses to relay
// because another live process holds the id's lock (outbox.ErrTwin) it relays all the
// same: whenever a row is committed (NOTIFY outbox, on a connection of its own to pool)
// or poll has passed, it claims and publishes a batch through relay.RunOnce, then takes
// every claim under id for a dead predecessor's and makes it claimable at once, as the
// lock's holder does, and publishes those too; and it reports itself ready. Each takes the other's rows in flight
// (published, not yet marked) and publishes them a second time: the inboxes drop the
// copies, and a relay that trusts its id to be its own without the lock publishes twice
// what it was meant to publish once.
func RelayingTwin(relay *outbox.Relay, id string, pool *pgxpool.Pool, poll time.Duration) Relay {
	return &relayingTwin{relay: relay, id: id, pool: pool, q: wrongstore.New(pool), poll: poll}
}

type relayingTwin struct {
	relay *outbox.Relay
	id    string
	pool  *pgxpool.Pool
	q     *wrongstore.Queries
	poll  time.Duration
}

func (t *relayingTwin) Ready(ctx context.Context) error {
	if err := t.relay.Ready(ctx); !errors.Is(err, outbox.ErrTwin) {
		return err
	}
	return nil
}

func (t *relayingTwin) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- t.relay.Run(ctx) }()
	wake := make(chan struct{}, 1)
	go t.listen(ctx, wake)
	poll := time.NewTicker(t.poll)
	defer poll.Stop()
	for {
		if errors.Is(t.relay.Ready(ctx), outbox.ErrTwin) {
			// Fresh rows first, as any relay claims them, racing the live relays for each;
			// then its namesake's rows in flight, taken for a dead predecessor's.
			n, err := t.relay.RunOnce(ctx)
			if err == nil {
				var taken int64
				if taken, err = t.q.TakeOverClaims(ctx, t.id); err == nil && taken > 0 {
					var again int
					again, err = t.relay.RunOnce(ctx)
					n += again
				}
			}
			if err == nil && n > 0 && ctx.Err() == nil {
				continue // more may be waiting
			}
		}
		select {
		case err := <-done:
			return err
		case <-wake:
		case <-poll.C:
		}
	}
}

// listen turns NOTIFY outbox into wake-ups until ctx ends, connecting again after a
// pause when the connection fails.
func (t *relayingTwin) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		if conn, err := pgx.ConnectConfig(ctx, t.pool.Config().ConnConfig.Copy()); err == nil {
			if _, err := conn.Exec(ctx, "LISTEN outbox"); err == nil {
				for {
					if _, err := conn.WaitForNotification(ctx); err != nil {
						break
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		backoff.Sleep(ctx, t.poll)
	}
}
