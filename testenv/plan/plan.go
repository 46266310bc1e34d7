// Package plan reads the plan Postgres chooses for a query and checks the one property a
// hot query must keep as its tables fill with history: it reaches the rows it needs
// through an index, by the index's key, and reads no table or index whole.
//
// A query that passes on an empty table can still read everything once the table holds a
// week of history, and the planner's choice depends on the statistics it has: a partial
// index holding a handful of live rows looks cheap to read whole, until a held snapshot
// keeps every entry it ever had (migration 00005 of the platform dropped one such index).
// So the checks run against tables seeded with history and analysed.
package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// Node is one node of a plan, as EXPLAIN (FORMAT JSON) gives it.
type Node struct {
	Type      string `json:"Node Type"`
	Relation  string `json:"Relation Name"`
	Alias     string `json:"Alias"`
	Index     string `json:"Index Name"`
	IndexCond string `json:"Index Cond"`
	Filter    string `json:"Filter"`
	Subplan   string `json:"Subplan Name"`
	Plans     []Node `json:"Plans"`
}

// Querier is what Of needs of a connection, a pool or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Of returns the plan Postgres chooses for query run with args: a custom plan for these
// values, as pgx's first executions of a prepared statement get. Nothing is executed.
func Of(ctx context.Context, db Querier, query string, args ...any) (Node, error) {
	var raw []byte
	if err := db.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&raw); err != nil {
		return Node{}, fmt.Errorf("explain: %w", err)
	}
	var out []struct {
		Plan Node `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return Node{}, fmt.Errorf("explain: read the plan: %v (%s)", err, raw)
	}
	return out[0].Plan, nil
}

// Scan is one read of a relation in a plan: how (the node type), through which index,
// and by which key.
type Scan struct {
	Relation, Alias, Type, Index, IndexCond string
}

// Bounded reports whether the scan reaches its rows by an index's key: an index scan
// with a condition on the index. A sequential scan reads the table whole; an index scan
// without a condition reads the index whole (in its order, or to count it).
func (s Scan) Bounded() bool {
	return s.Index != "" && s.IndexCond != ""
}

func (s Scan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of %s", s.Type, s.Relation)
	if s.Alias != "" && s.Alias != s.Relation {
		fmt.Fprintf(&b, " (%s)", s.Alias)
	}
	if s.Index != "" {
		fmt.Fprintf(&b, " using %s", s.Index)
	}
	if s.IndexCond != "" {
		fmt.Fprintf(&b, " on %s", clip(s.IndexCond))
	}
	return b.String()
}

// clip shortens a condition to what a reader needs: a batch's array of ids is thousands
// of characters.
func clip(cond string) string {
	const most = 160
	if len(cond) <= most {
		return cond
	}
	return cond[:most] + "…"
}

// Scans lists every read of a relation in the plan, sub-plans included. A bitmap heap
// scan is listed once, with the index and condition of the bitmap index scan under it.
func (n Node) Scans() []Scan {
	var out []Scan
	var walk func(Node)
	walk = func(n Node) {
		switch {
		case n.Type == "Bitmap Heap Scan":
			s := Scan{Relation: n.Relation, Alias: n.Alias, Type: n.Type}
			for _, c := range n.Plans {
				if c.Type == "Bitmap Index Scan" {
					s.Index, s.IndexCond = c.Index, c.IndexCond
				}
			}
			out = append(out, s)
			return
		case n.Relation != "" && strings.Contains(n.Type, "Scan"):
			out = append(out, Scan{Relation: n.Relation, Alias: n.Alias, Type: n.Type, Index: n.Index, IndexCond: n.IndexCond})
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(n)
	return out
}

// String is the plan as an indented tree of node types, relations, indexes and
// conditions: what a failed check prints.
func (n Node) String() string {
	var b strings.Builder
	var walk func(Node, int)
	walk = func(n Node, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteString(n.Type)
		if n.Subplan != "" {
			fmt.Fprintf(&b, " [%s]", n.Subplan)
		}
		if n.Relation != "" {
			fmt.Fprintf(&b, " %s", n.Relation)
			if n.Alias != "" && n.Alias != n.Relation {
				fmt.Fprintf(&b, " %s", n.Alias)
			}
		}
		if n.Index != "" {
			fmt.Fprintf(&b, " using %s", n.Index)
		}
		if n.IndexCond != "" {
			fmt.Fprintf(&b, " cond %s", clip(n.IndexCond))
		}
		if n.Filter != "" {
			fmt.Fprintf(&b, " filter %s", clip(n.Filter))
		}
		b.WriteByte('\n')
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// Query is a hot query to check: its text and arguments, and the indexes each relation
// it reads may be read through. Every read must go through one of them, by its key. Two
// kinds of read may be whole: of a relation in Small, one that stays small whatever the
// history (a catalogue), and of an index in Partial, a partial index whose rows are the
// work waiting (the pending rows), not the history.
type Query struct {
	Name    string
	SQL     string
	Args    []any
	Reads   map[string][]string
	Small   []string
	Partial []string
}

// Check fails t for each read of each query's plan that is not through one of its
// relation's indexes by the index's key, printing the plan.
func Check(t testing.TB, db Querier, queries ...Query) {
	t.Helper()
	for _, q := range queries {
		check(t, db, q)
	}
}

func check(t testing.TB, db Querier, q Query) {
	t.Helper()
	p, err := Of(t.Context(), db, q.SQL, q.Args...)
	if err != nil {
		t.Errorf("%s: %v", q.Name, err)
		return
	}
	var wrong []string
	for _, s := range p.Scans() {
		switch {
		case slices.Contains(q.Small, s.Relation):
		case q.Reads[s.Relation] == nil:
			wrong = append(wrong, s.String()+": a relation the query is not meant to read")
		case !s.Bounded() && !slices.Contains(q.Partial, s.Index):
			wrong = append(wrong, s.String()+": reads it whole")
		case !slices.Contains(q.Reads[s.Relation], s.Index):
			wrong = append(wrong, fmt.Sprintf("%s: not through %s", s, strings.Join(q.Reads[s.Relation], " or ")))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%s:\n  %s\nplan:\n%s", q.Name, strings.Join(wrong, "\n  "), p)
	}
}

// Rows is how many rows of history a plan test puts in a table: enough that reading a
// table or an index whole costs more than the planner will pay, as it would with a busy
// week's history. The benchmarks measure the cost itself.
const Rows = 200_000

// History is a test database with migrations applied and filled with history: statements
// run on one session, with pg_temp.id_at(ts) defined for them (a UUIDv7-like id made at
// ts: its first 48 bits are the milliseconds) and no statement timeout (the role's is for
// requests), then the database analysed as autovacuum would have. A plan is Postgres's
// choice, with nothing for the race detector to find, so the race pass skips the test
// (make test runs it).
func History(t *testing.T, migrations []pgdb.Migrations, statements ...string) *pgxpool.Pool {
	t.Helper()
	if testenv.Race() {
		t.Skip("a query plan has no data race to find; make test checks it")
	}
	ctx := t.Context()
	admin, dbURL := testenv.Database(t, "plans")
	pool, err := pgdb.Open(ctx, admin, dbURL, migrations...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	start := time.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	prelude := []string{
		`SET statement_timeout = 0`,
		`CREATE FUNCTION pg_temp.id_at(ts timestamptz) RETURNS uuid LANGUAGE sql AS $$
		   SELECT encode(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM ts) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid $$`,
	}
	for _, sql := range append(append(prelude, statements...), `VACUUM ANALYZE`) {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("seed the history: %v\n%s", err, sql)
		}
	}
	t.Logf("history seeded in %v", time.Since(start).Round(time.Millisecond))
	return pool
}
