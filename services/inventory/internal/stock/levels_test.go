package stock_test

import (
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/inventory/internal/stock"
	"github.com/bookstore-go/bookstore/testenv"
)

// The clean-up deletes the levels a newer one replaced more than the retention ago, and
// keeps the rest: the recent history, and every book's newest level however old it is
// (a book nobody ordered for a week still has its stock).
func TestLevelCleanupDeletesOldReplacedLevelsAndKeepsEachBooksStock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := database(t, 2)
	// Dune: five levels two hours old, then two recent ones. Hyperion: its seeded level
	// only, aged two hours.
	if _, err := pool.Exec(ctx, "UPDATE stock_levels SET changed_at = now() - interval '2 hours'"); err != nil {
		t.Fatal(err)
	}
	for _, levels := range []struct {
		from, to int
		age      string
	}{{2, 5, "2 hours"}, {6, 7, "1 minute"}} {
		if _, err := pool.Exec(ctx, `INSERT INTO stock_levels (book_id, version, on_hand, reserved, changed_at)
			SELECT $1, v, 10, v, now() - $4::interval FROM generate_series($2::int, $3::int) v`,
			dune, levels.from, levels.to, levels.age); err != nil {
			t.Fatal(err)
		}
	}
	n, err := stock.CleanupLevels(ctx, pool, stock.LevelRetention)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("deleted %d levels, want Dune's 5 replaced two hours ago", n)
	}
	if got := testenv.Count(t, pool, "SELECT count(*) FROM stock_levels WHERE book_id = $1", dune); got != 2 {
		t.Errorf("Dune has %d levels left, want its 2 recent ones", got)
	}
	if got := testenv.Count(t, pool, "SELECT count(*) FROM stock_levels WHERE book_id = $1", hyperion); got != 1 {
		t.Errorf("Hyperion has %d levels left, want its one, two hours old and still its stock", got)
	}
	if got := reserved(t, pool, dune); got != 7 {
		t.Errorf("Dune's stock reads %d reserved, want the newest level's 7", got)
	}
	if n, err := stock.CleanupLevels(ctx, pool, time.Duration(0)); err != nil || n != 1 {
		t.Errorf("with no retention: deleted %d (%v), want Dune's level 6 only", n, err)
	}
}
