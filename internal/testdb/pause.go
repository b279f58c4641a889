package testdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RowPause holds, for a test, every statement of one role that reads one
// row of the outbox table, at that row, until Release: a statement paused
// this way has taken its snapshot and waits in the middle of its scan,
// which makes the interleavings of concurrent claims and admin writes
// deterministic.
type RowPause struct {
	db   *DB
	gate *pgx.Conn
	key  int64
}

// PauseRowReads grants role USAGE on the schema and SELECT and UPDATE on
// the default outbox table, and makes every statement of role that reads
// the row whose id is id (text of a uuid) wait before it goes past that
// row until the returned pause is released. It is a row-level-security
// policy whose function takes advisory lock key shared while the pause
// holds it exclusively; the table's owner (the test's other connections)
// bypasses the policy. key must be unique among the tests that run at
// once in the database.
func (db *DB) PauseRowReads(tb testing.TB, role, id string, key int64) *RowPause {
	tb.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE ON outbox_events TO %[2]s;
CREATE FUNCTION pause_at(row_id uuid) RETURNS bool LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
	IF row_id = '%[3]s' THEN
		PERFORM pg_advisory_xact_lock_shared(%[4]d);
	END IF;
	RETURN true;
END $f$;
ALTER TABLE outbox_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY pause ON outbox_events USING (pause_at(id))`,
		pgx.Identifier{db.Schema}.Sanitize(), pgx.Identifier{role}.Sanitize(), id, key))
	if err != nil {
		tb.Fatalf("testdb: pause row reads: %v", err)
	}
	p := &RowPause{db: db, gate: db.Conn(tb), key: key}
	if _, err := p.gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		tb.Fatalf("testdb: pause row reads: %v", err)
	}
	return p
}

// AwaitPaused returns once a statement waits at the paused row (within a
// minute, else it fails the test).
func (p *RowPause) AwaitPaused(tb testing.TB) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		err := p.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objid = $1`, p.key).Scan(&n)
		if err != nil {
			tb.Fatalf("testdb: await paused: %v", err)
		}
		if n > 0 {
			return
		}
	}
	tb.Fatalf("testdb: no statement paused at the row within a minute")
}

// Release lets the paused statements go on.
func (p *RowPause) Release(tb testing.TB) {
	tb.Helper()
	if _, err := p.gate.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, p.key); err != nil {
		tb.Fatalf("testdb: release pause: %v", err)
	}
}
