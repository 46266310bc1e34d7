package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/testenv"
	"github.com/bookstore-go/bookstore/testenv/cluster"
)

// clusterWait bounds each wait of the cluster test for an order to be settled or emailed:
// after a node loss the services first have to notice it and reconnect, on a two-core
// machine that also runs three RabbitMQ nodes and two Postgres servers.
const clusterWait = 3 * time.Minute

// The production topology on one machine: a three-node RabbitMQ cluster whose quorum
// queues have a member on every node, and one Postgres primary with a synchronous standby
// holding every service's database; the four services are given every broker address and
// both database hosts, as a user's deployment would configure them. An order placed
// before the node that leads the queues is killed, one placed while it is down, and one
// placed after the Postgres primary is killed and its standby promoted are each decided
// once and emailed once: the services find the surviving broker nodes and the new primary
// by themselves.
func TestOrdersPlacedAcrossABrokerNodeLossAndAPostgresFailoverAreEachEmailedOnce(t *testing.T) {
	t.Parallel()
	if err := cluster.RabbitMQAvailable(); err != nil {
		testenv.Unavailable(t, "RabbitMQ 3.10", err)
	}
	if err := cluster.PostgresAvailable(); err != nil {
		testenv.Unavailable(t, "Postgres 15", err)
	}
	ctx := context.Background()
	var rmq *cluster.RabbitMQ
	var pg *cluster.Postgres
	rmqErr := make(chan error, 1)
	go func() {
		var err error
		rmq, err = cluster.StartRabbitMQ(ctx, "", 3)
		rmqErr <- err
	}()
	pg, err := cluster.StartPostgres(ctx, "", "e2e")
	if err == nil {
		t.Cleanup(func() { _ = pg.Close() })
	}
	if rerr := <-rmqErr; rerr != nil {
		t.Fatal(rerr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("RabbitMQ:\n%s", rmq.Logs(context.Background()))
			if pg != nil {
				t.Logf("Postgres:\n%s", pg.Logs())
			}
		}
		_ = rmq.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 RabbitMQ nodes up in %v", rmq.BootTime.Round(time.Millisecond))

	s := startClusterSystem(t, rmq, pg)
	dune := bookID(1)
	s.setStock(dune, "Dune", 10)

	before := s.placeOrderRetrying("before@example.com", line{dune, 1})
	s.emailedOnce(before, "before@example.com")

	const busiest = "inventory.order-placed" // every order passes it first
	leader, err := rmq.Leader(ctx, "/", busiest)
	if err != nil {
		t.Fatal(err)
	}
	if err := rmq.Kill(leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed RabbitMQ node %d, the leader of %s", leader, busiest)
	during := s.placeOrderRetrying("during@example.com", line{dune, 1})
	s.emailedOnce(during, "during@example.com")

	times, err := pg.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Postgres failover: kill %v, promote %v, rejoin %v", times.Kill.Round(time.Millisecond), times.Promote.Round(time.Millisecond), times.Rejoin.Round(time.Millisecond))
	after := s.placeOrderRetrying("after@example.com", line{dune, 1})
	s.emailedOnce(after, "after@example.com")

	// Decided once: the book's reservations are the three orders' lines, no more.
	if b := s.book(dune); b.Reserved != 3 {
		t.Errorf("Dune after three confirmed orders of one copy: %+v, want reserved 3", b)
	}
}

// startClusterSystem starts the four services on the cluster: each with its own role and
// database on the Postgres pair, and its own broker user (compose's passwords) on every
// RabbitMQ node.
func startClusterSystem(t *testing.T, rmq *cluster.RabbitMQ, pg *cluster.Postgres) *system {
	t.Helper()
	admin := rmq.URL("admin", "admin", "/")
	return startServices(t, admin, func(name string) servers {
		amqpURL := rmq.URL(name, name+"-dev", "/")
		if name == "emailprovider" {
			amqpURL = admin // it has no broker user: it never uses the broker
		}
		return servers{DatabaseURL: pg.URL(name, name), AdminURL: pg.AdminURL(), AMQPURL: amqpURL}
	})
}

// placeOrderRetrying places an order as a client does through an outage: the same request
// with the same Idempotency-Key until it is answered 201, so that an order the service
// took before its answer was lost is not placed twice.
func (s *system) placeOrderRetrying(email string, lines ...line) order {
	s.t.Helper()
	key := testenv.Name("order")
	deadline := time.Now().Add(clusterWait)
	for {
		var o order
		code := s.call(http.MethodPost, s.URL["ordering"]+"/orders", map[string]any{"customer_email": email, "lines": lines}, &o, "Idempotency-Key", key)
		if code == http.StatusCreated || code == http.StatusOK {
			return o
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("POST /orders for %s: still %d after %v\n%s", email, code, clusterWait, s.logs("ordering"))
		}
		time.Sleep(200 * time.Millisecond) // the client's back-off before it asks again
	}
}

// emailedOnce waits until the order is confirmed and its notification completed, and
// checks that it was decided once and emailed once.
func (s *system) emailedOnce(o order, address string) {
	s.t.Helper()
	if got := s.settled(o.ID, clusterWait); got.Status != "confirmed" {
		s.t.Fatalf("order %s for %s is %s, want confirmed", o.ID, address, got.Status)
	}
	var n notification
	testenv.Eventually(s.t, clusterWait, "notification completed for "+o.ID, func() bool {
		ns := s.notifications(o.ID)
		if len(ns) > 1 {
			s.t.Fatalf("order %s has %d notifications, want one: %+v", o.ID, len(ns), ns)
		}
		if len(ns) == 1 && ns[0].Status == "completed" {
			n = ns[0]
			return true
		}
		return false
	})
	emails := s.emailsTo(address)
	if len(emails) != 1 || emails[0].Deliveries != 1 || emails[0].IdempotencyKey != n.IdempotencyKey {
		s.t.Errorf("emails to %s = %+v, want one delivered once with key %q", address, emails, n.IdempotencyKey)
	}
	s.t.Logf("order %s for %s confirmed and emailed once", o.ID, address)
}
