// Package relaytest gives the log relay's tests a migrated log: a test
// schema (internal/testdb) with a log table (outbox.KindLog) in it, and
// plain-SQL helpers to write events. No production code imports it.
package relaytest

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// LogName is the log table's name in the test's schema.
const LogName = "relay_log"

// NewLog creates a test schema with the log migrated into it and returns
// it with the log's table.
func NewLog(tb testing.TB) (*testdb.DB, outbox.Table) {
	tb.Helper()
	db := testdb.New(tb)
	table := outbox.Table{Schema: db.Schema, Name: LogName}
	conn := db.Conn(tb)
	if err := migrations.Migrate(context.Background(), conn, migrations.Config{Table: table, Kind: outbox.KindLog}); err != nil {
		tb.Fatalf("relaytest: migrate the log: %v", err)
	}
	return db, table
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Emit inserts n events of key (none when "") into the log on q, with a
// one-byte payload and one header, and returns their ids in seq order.
func Emit(tb testing.TB, q Querier, key string, n int) []uuid.UUID {
	tb.Helper()
	rows, err := q.Query(context.Background(), `INSERT INTO `+LogName+` (id, event_type, partition_key, payload, headers)
		SELECT gen_random_uuid(), 'test.event', nullif($1, ''), '\x01'::bytea, '{"h":"v"}'::jsonb
		FROM generate_series(1, $2) RETURNING id::text`, key, n)
	if err != nil {
		tb.Errorf("relaytest: emit: %v", err)
		return nil
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Errorf("relaytest: emit: %v", err)
		return nil
	}
	ids := make([]uuid.UUID, len(texts))
	for i, s := range texts {
		ids[i] = uuid.MustParse(s)
	}
	return ids
}
