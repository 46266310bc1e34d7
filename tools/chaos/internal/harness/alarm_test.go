package harness

import (
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/testenv"
)

// The alarm proxy tells a real client, through a real broker's connection, what a memory
// alarm would: connection.blocked to the publishing connection only (after its
// handshake), the same to one opened during the alarm, connection.unblocked at its end;
// and it drops a blocked connection while the other one lives on.
func TestTheAlarmProxyBlocksPublishersDropsThemAndUnblocks(t *testing.T) {
	vhost := testenv.VHost(t)
	u, err := url.Parse(vhost)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newAlarmProxy("test", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	u.Host = p.addr()
	dial := func(name string) (*amqp.Connection, <-chan amqp.Blocking) {
		t.Helper()
		c, err := amqp.DialConfig(u.String(), amqp.Config{Properties: amqp.Table{"connection_name": name}})
		if err != nil {
			t.Fatalf("dial %s through the alarm proxy: %v", name, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, c.NotifyBlocked(make(chan amqp.Blocking, 4))
	}
	expect := func(ch <-chan amqp.Blocking, active bool) {
		t.Helper()
		select {
		case b := <-ch:
			if b.Active != active || (active && b.Reason != "low on memory") {
				t.Fatalf("got %+v, want active=%v", b, active)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no blocking notice (active=%v) within 5 s", active)
		}
	}
	quiet := func(ch <-chan amqp.Blocking) {
		t.Helper()
		select {
		case b := <-ch:
			t.Fatalf("the consuming connection heard %+v", b)
		case <-time.After(200 * time.Millisecond):
		}
	}

	pub, pubNotes := dial("svc-publish")
	consume, consumeNotes := dial("svc-consume")
	if n := p.Block(PublishConnMatch, "low on memory"); n != 1 {
		t.Fatalf("blocked %d connections, want the publishing one", n)
	}
	expect(pubNotes, true)
	quiet(consumeNotes)

	if n := p.DropBlocked(); n != 1 {
		t.Fatalf("dropped %d connections, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !pub.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !pub.IsClosed() || consume.IsClosed() {
		t.Fatalf("after the drop: publishing closed %v (want true), consuming closed %v (want false)", pub.IsClosed(), consume.IsClosed())
	}

	// A publishing connection opened during the alarm is blocked when it publishes.
	again, againNotes := dial("svc-publish")
	ch, err := again.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "no-such-queue", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	expect(againNotes, true)
	if n, late := p.Unblock(); n != 1 || late != 1 {
		t.Fatalf("unblocked %d connections (%d blocked when they published), want 1 (1)", n, late)
	}
	expect(againNotes, false)
	ch, err = again.Channel()
	if err != nil {
		t.Fatalf("a channel after the alarm: %v", err)
	}
	_ = ch.Close()
	quiet(consumeNotes)
}
