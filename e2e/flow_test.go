package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// An order for a book in stock is confirmed, the book's reserved count grows by its
// quantity, and the customer gets exactly one "order confirmed" email.
func TestConfirmedOrderEndToEnd(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	dune := bookID(1)
	s.setStock(dune, "Dune", 10)
	before := s.book(dune)

	o := s.placeOrder("ada@example.com", line{dune, 2})
	if got := s.settled(o.ID, 30*time.Second); got.Status != "confirmed" {
		t.Fatalf("order %s is %s, want confirmed", o.ID, got.Status)
	}
	after := s.book(dune)
	if after.Reserved != before.Reserved+2 || after.Available != after.OnHand-after.Reserved {
		t.Errorf("Dune before %+v, after %+v: want reserved +2", before, after)
	}
	n, emails := s.emailed(o.ID, "ada@example.com")
	if n.Kind != "order-confirmed" {
		t.Errorf("notification kind %q, want order-confirmed", n.Kind)
	}
	if len(emails) != 1 || emails[0].Deliveries != 1 || emails[0].IdempotencyKey != n.IdempotencyKey {
		t.Errorf("emails to ada = %+v, want one delivered once with key %q", emails, n.IdempotencyKey)
	}
}

// An order for more than is available is rejected, nothing is reserved, and the
// customer gets exactly one "out of stock" email.
func TestRejectedOrderEndToEnd(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	scarce := bookID(2)
	s.setStock(scarce, "Scarce", 1)

	o := s.placeOrder("grace@example.com", line{scarce, 3}, line{bookID(1), 1})
	if got := s.settled(o.ID, 30*time.Second); got.Status != "rejected" {
		t.Fatalf("order %s is %s, want rejected", o.ID, got.Status)
	}
	if b := s.book(scarce); b.Reserved != 0 {
		t.Errorf("scarce book reserved %d after a rejected order, want 0", b.Reserved)
	}
	if b := s.book(bookID(1)); b.Reserved != 0 {
		t.Errorf("the other line's book was reserved (%d): all or nothing broken", b.Reserved)
	}
	n, emails := s.emailed(o.ID, "grace@example.com")
	if n.Kind != "order-rejected" {
		t.Errorf("notification kind %q, want order-rejected", n.Kind)
	}
	if len(emails) != 1 || emails[0].Deliveries != 1 {
		t.Errorf("emails to grace = %+v, want exactly one delivered once", emails)
	}
}

// 200 concurrent orders over three overlapping books: no deadlock, stock never oversold,
// reserved equals the sum of the confirmed lines, every order settled.
func TestConcurrentOrdersOverThreeBooks(t *testing.T) {
	t.Parallel()
	s := startSystem(t, nil)
	books := []string{bookID(1), bookID(2), bookID(3)}
	for i, id := range books {
		s.setStock(id, fmt.Sprintf("Contended %d", i), 60)
	}
	const n = 200
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			// Two or three books in a random order, so lock order matters.
			perm := r.Perm(3)[:2+r.IntN(2)]
			var lines []line
			for _, p := range perm {
				lines = append(lines, line{books[p], 1 + r.IntN(3)})
			}
			var o order
			code := s.call(http.MethodPost, s.URL["ordering"]+"/orders",
				map[string]any{"customer_email": fmt.Sprintf("c%d@example.com", i), "lines": lines}, &o)
			if code != http.StatusCreated {
				t.Errorf("order %d: %d", i, code)
				return
			}
			ids[i] = o.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	confirmedQty := map[string]int{}
	statuses := map[string]int{}
	for _, id := range ids {
		o := s.settled(id, 90*time.Second)
		statuses[o.Status]++
		if o.Status == "confirmed" {
			for _, l := range o.Lines {
				confirmedQty[l.BookID] += l.Quantity
			}
		}
	}
	t.Logf("200 orders: %v", statuses)
	if statuses["confirmed"] == 0 || statuses["rejected"] == 0 {
		t.Errorf("want both outcomes under contention for 3×60 copies, got %v", statuses)
	}
	for _, id := range books {
		b := s.book(id)
		if b.Reserved != confirmedQty[id] {
			t.Errorf("book %s reserved %d, confirmed lines sum to %d", id, b.Reserved, confirmedQty[id])
		}
		if b.Available < 0 || b.Reserved > b.OnHand {
			t.Errorf("book %s oversold: %+v", id, b)
		}
	}
	if logs := s.logs("inventory"); strings.Contains(logs, "deadlock") || strings.Contains(logs, "40P01") {
		t.Errorf("inventory logged a deadlock")
	}
}
