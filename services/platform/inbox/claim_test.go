package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/services/platform/inbox"
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
	"github.com/bookstore-go/bookstore/testenv"
)

// inboxDB is a fresh database with the platform's tables and a one-row stock table the
// tests' work adds to.
func inboxDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "inbox")
	pool, err := pgdb.Open(ctx, admin, dbURL, pgdb.Migrations{FS: schema.Platform, VersionTable: "goose_platform_version"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE stock (id int PRIMARY KEY, reserved int NOT NULL);
		INSERT INTO stock VALUES (1, 0);
		CREATE TABLE work (message_id uuid NOT NULL, consumer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newEnvelope(t *testing.T) event.Envelope {
	t.Helper()
	env, err := event.New("example/source", testenv.ExampleType, "order-1", 1, map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Every subscriber gets its own copy of an event, so two consumers whose inbox rows share
// one table must not take each other's copy for a duplicate: the key is the message id
// and the consumer, not the message id alone.
func TestTwoConsumersSharingADatabaseEachProcessTheSameMessageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := inboxDB(t)
	env := newEnvelope(t)
	record := func(consumer string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO work VALUES ($1, $2)", env.UUID(), consumer)
			return err
		}
	}
	for _, delivery := range []string{"first", "second"} {
		for _, consumer := range []string{"inventory", "notification"} {
			processed, err := inbox.Process(ctx, pool, consumer, env, record(consumer))
			if err != nil {
				t.Fatalf("%s delivery to %s: %v", delivery, consumer, err)
			}
			if want := delivery == "first"; processed != want {
				t.Errorf("%s delivery to %s: processed %v, want %v", delivery, consumer, processed, want)
			}
		}
	}
	rows, err := pool.Query(ctx, "SELECT consumer, count(*) FROM work GROUP BY consumer ORDER BY consumer")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var c string
		var n int
		err := r.Scan(&c, &n)
		return fmt.Sprintf("%s:%d", c, n), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "inventory:1" || got[1] != "notification:1" {
		t.Errorf("work done per consumer = %v, want [inventory:1 notification:1]", got)
	}
}

// The claim is the first statement of the transaction, so a copy of a message processed
// before is skipped before its work runs: it takes none of the work's locks and does not
// queue behind another transaction that holds them (here, an unrelated order at work on
// the same stock row).
func TestACopyOfAProcessedMessageDoesNotWaitForTheLocksItsWorkWouldTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := inboxDB(t)
	env := newEnvelope(t)
	runs := 0
	reserve := func(ctx context.Context) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			runs++
			_, err := tx.Exec(ctx, "UPDATE stock SET reserved = reserved + 2 WHERE id = 1")
			return err
		}
	}
	if processed, err := inbox.Process(ctx, pool, "inventory", env, reserve(ctx)); err != nil || !processed {
		t.Fatalf("first delivery: processed %v, err %v", processed, err)
	}

	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, "SELECT 1 FROM stock WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	copyCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	started := time.Now()
	processed, err := inbox.Process(copyCtx, pool, "inventory", env, reserve(copyCtx))
	if err != nil {
		t.Fatalf("the copy, while another transaction holds the stock row: %v after %v (it waited for the row its work locks)",
			err, time.Since(started).Round(time.Millisecond))
	}
	if processed {
		t.Error("the copy was processed again")
	}
	if runs != 1 {
		t.Errorf("the work ran %d times, want 1: a duplicate's work ran before its claim", runs)
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var reserved int
	if err := pool.QueryRow(ctx, "SELECT reserved FROM stock WHERE id = 1").Scan(&reserved); err != nil {
		t.Fatal(err)
	}
	if reserved != 2 {
		t.Errorf("reserved = %d, want 2", reserved)
	}
}
