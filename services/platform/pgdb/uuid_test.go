package pgdb_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// Ids go to Postgres and come back as the same ids, alone, in arrays and as NULLs, in
// both of pgx's formats, on a pool Open made (which registers RegisterTypes).
func TestAPoolFromOpenWritesAndReadsUUIDsUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, dbURL := testenv.Database(t, "pgdb")
	pool, err := pgdb.Open(ctx, admin, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	id, ids := uuid.New(), []uuid.UUID{uuid.New(), uuid.New()}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		var text string
		var back uuid.UUID
		var null uuid.NullUUID
		var nullPtr *uuid.UUID
		err := pool.QueryRow(ctx, "SELECT $1::uuid::text, $1::uuid, NULL::uuid, NULL::uuid", mode, id).Scan(&text, &back, &null, &nullPtr)
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if text != id.String() || back != id || null.Valid || nullPtr != nil {
			t.Errorf("%v: got %s, %s, %v, %v; want %s, the same and two NULLs", mode, text, back, null, nullPtr, id)
		}
		// A NULL leaves a uuid.UUID as it was, as uuid's own Scan does.
		if err := pool.QueryRow(ctx, "SELECT NULL::uuid", mode).Scan(&back); err != nil || back != id {
			t.Errorf("%v: NULL scanned into a uuid.UUID: %v, %s; want no error and %s kept", mode, err, back, id)
		}
	}
	// pgx's simple protocol cannot encode an array of a type it does not know, with or
	// without RegisterTypes: arrays go in the default mode only.
	var backs []uuid.UUID
	if err := pool.QueryRow(ctx, "SELECT $1::uuid[]", ids).Scan(&backs); err != nil || !slices.Equal(backs, ids) {
		t.Errorf("an array of ids: %v, %v; want %v", backs, err, ids)
	}
}

// BenchmarkEncodeUUID encodes one id as pgx sends it, binary, with pgx's own type map
// and with one that RegisterTypes taught.
func BenchmarkEncodeUUID(b *testing.B) {
	id := uuid.New()
	for _, c := range []struct {
		name       string
		registered bool
	}{{"driver.Valuer", false}, {"registered", true}} {
		m := pgtype.NewMap()
		if c.registered {
			pgdb.RegisterTypes(m)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
