package testdb

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// InvalidOrderIndex leaves in the test's outbox table an INVALID index
// named as its order index (outbox_events_order_idx), as a CREATE INDEX
// CONCURRENTLY that failed leaves one: a unique build on two rows of one
// event type, which fails on their duplicate; the two rows are deleted
// after. The table must not have an index of that name.
func (db *DB) InvalidOrderIndex(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	ids := []uuid.UUID{uuid.New(), uuid.New()}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type) SELECT unnest($1::uuid[]), 'dup'`, ids); err != nil {
		tb.Fatalf("testdb: invalid order index: %v", err)
	}
	_, err := db.Pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY outbox_events_order_idx ON outbox_events (event_type)`)
	if err == nil {
		tb.Fatalf("testdb: invalid order index: the unique build on duplicates succeeded")
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM outbox_events WHERE id = ANY($1)`, ids); err != nil {
		tb.Fatalf("testdb: invalid order index: %v", err)
	}
	var valid bool
	err = db.Pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'outbox_events_order_idx'::regclass`).Scan(&valid)
	if err != nil || valid {
		tb.Fatalf("testdb: invalid order index: valid %t, %v", valid, err)
	}
}
