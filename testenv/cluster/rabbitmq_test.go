package cluster

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/testenv"
)

// startRabbitMQ starts a cluster of n nodes for one test and closes it when the test ends,
// checking that nothing of it is left.
func startRabbitMQ(t *testing.T, n int) *RabbitMQ {
	t.Helper()
	if err := RabbitMQAvailable(); err != nil {
		testenv.Unavailable(t, "RabbitMQ 3.10", err)
	}
	r, err := StartRabbitMQ(context.Background(), "", n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d RabbitMQ nodes booted, clustered and their quorum queues replicated in %v", n, r.BootTime.Round(time.Millisecond))
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, err := os.Stat(r.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("close left %s behind (%v)", r.dir, err)
		}
		if left := marked(r.dir); len(left) > 0 {
			t.Errorf("close left processes %v running", left)
		}
	})
	return r
}

// nodeURL is node i's own AMQP URL for user, as a client pinned to it dials.
func nodeURL(r *RabbitMQ, i int, user, password string) string {
	return "amqp://" + user + ":" + password + "@" + r.Addrs()[i] + "/"
}

// A message published to a quorum queue of the cluster survives the loss of the node that
// leads the queue: another node takes the lead and delivers it, and the lost node, booted
// again, rejoins with its replica. A node stopped gracefully rejoins the same way.
func TestAQuorumQueueOfTheClusterKeepsItsMessagesThroughTheLossOfItsLeader(t *testing.T) {
	t.Parallel()
	r := startRabbitMQ(t, 3)
	ctx := context.Background()
	const queue = "inventory.order-placed"
	leader, err := r.Leader(ctx, "/", queue)
	if err != nil {
		t.Fatal(err)
	}
	other := (leader + 1) % 3

	// ordering publishes an order through a node that does not lead the queue.
	conn, err := amqp.Dial(nodeURL(r, other, "ordering", "ordering-dev"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "bookstore.events", "ordering.order-placed.v1", true, false,
		amqp.Publishing{MessageId: "order-1", DeliveryMode: amqp.Persistent, Body: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := confirm.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	_ = conn.Close()

	if err := r.Kill(leader); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "another node leads "+queue, func() bool {
		l, err := r.Leader(ctx, "/", queue)
		return err == nil && l != leader
	})
	// inventory gets it from the remaining majority.
	got := ""
	testenv.Eventually(t, 60*time.Second, "inventory gets the order from the remaining nodes", func() bool {
		conn, err := amqp.Dial(nodeURL(r, other, "inventory", "inventory-dev"))
		if err != nil {
			return false
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		d, ok, err := ch.Get(queue, false)
		if err != nil || !ok {
			return false
		}
		got = d.MessageId
		return d.Ack(false) == nil
	})
	if got != "order-1" {
		t.Fatalf("got message %q, want order-1", got)
	}

	began := time.Now()
	if err := r.Start(ctx, leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d booted again and rejoined, its replicas online, in %v", leader, time.Since(began).Round(time.Millisecond))
	if !strings.Contains(r.ManagementURL(), "admin:admin@127.") {
		t.Errorf("management URL %s", r.ManagementURL())
	}

	if err := r.Stop(other); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := r.Start(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d stopped gracefully and rejoined in %v", other, time.Since(began).Round(time.Millisecond))
}
