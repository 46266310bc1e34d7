package main

import (
	"net/url"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/testenv"
)

// RabbitMQ stops answering on inventory's publishing connection (a black-holed link, as
// Toxiproxy's timeout toxic makes it) while its consuming connection is fine. Inventory
// keeps consuming and reserving, because the two have connections of their own; the
// answers wait in its outbox without spending an attempt, and go out once the link
// answers again.
func TestAStalledPublishLinkDoesNotStopConsuming(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u, _ := url.Parse(e.amqpURL)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	proxied := e
	proxied.amqpURL = u.String()
	startInProcess(t, proxied, "RELAY_CONFIRM_TIMEOUT", "1s")

	proxy.StallMatching("inventory-publish") // the AMQP connection_name, sent in the handshake
	const n = 3
	for range n {
		publishEvent(t, e.amqpURL, orderPlaced(t, contracts.Line{BookID: dune, Quantity: 1}))
	}
	db := testenv.Pool(t, e.databaseURL)
	testenv.Eventually(t, 30*time.Second, "orders reserved while the publish link is stalled", func() bool {
		return reserved(t, db, dune) == n
	})
	if c := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'"); c != 0 {
		t.Fatalf("%d answers published through a stalled link", c)
	}

	proxy.Restore()
	testenv.Eventually(t, 90*time.Second, "answers published once the link answers", func() bool {
		return testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE state = 'published'") == n
	})
	if c := testenv.Count(t, db, "SELECT count(*) FROM outbox WHERE attempts > 0 OR state = 'dead'"); c != 0 {
		t.Errorf("%d answers spent attempts on a stalled link", c)
	}
	if got := distinctIDs(sut.Drain(t, e.amqpURL, outcomesQueue, time.Second)); len(got) != n {
		t.Errorf("%d distinct answers announced, want %d", len(got), n)
	}
}
