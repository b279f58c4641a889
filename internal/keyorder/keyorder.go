// Package keyorder is the outbox table's per-key order index
// (<table>_order_idx): what it holds, the statements that build and drop
// it, and how to read whether it is there. Since schema version 12 the
// index is optional (migrations.Config.KeyOrder): dispatchers with
// Ordering PerKey need it, admin's blocked-key views read it, and every
// keyed event pays one index entry for it at insert, claim and retry.
package keyorder

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Definition is the index's key and predicate, as migration 007 built
// it: per order key (coalesce(partition_key, aggregate_id)) in seq
// order, the rows that can block their key (every status but SENT), and
// no row without a key.
const Definition = `((coalesce(partition_key, aggregate_id)), seq)
    WHERE status <> 'SENT' AND coalesce(partition_key, aggregate_id) IS NOT NULL`

// Create is the statement that builds the index on n's outbox table
// without blocking writes (CONCURRENTLY: outside a transaction), doing
// nothing when an index of its name exists.
func Create(n sqlname.Names) string {
	return "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + n.Quoted(sqlname.SuffixOrderIndex) +
		" ON " + n.Qualified + " " + Definition
}

// Build is the statement that builds the index on n's outbox table in a
// transaction (not CONCURRENTLY): it blocks writes to the table while it
// reads the table's rows, and does nothing when an index of its name
// exists.
func Build(n sqlname.Names) string {
	return "CREATE INDEX IF NOT EXISTS " + n.Quoted(sqlname.SuffixOrderIndex) + " ON " + n.Qualified + " " + Definition
}

// Drop is the statement that drops the index without blocking reads or
// writes of the table (CONCURRENTLY: outside a transaction).
func Drop(n sqlname.Names) string {
	return "DROP INDEX CONCURRENTLY IF EXISTS " + n.Schema + "." + n.Quoted(sqlname.SuffixOrderIndex)
}

// State is what the database holds of the index.
type State int

const (
	// Missing: no relation of the index's name on the table.
	Missing State = iota
	// Invalid: the index exists but PostgreSQL does not use it (a
	// CREATE INDEX CONCURRENTLY that failed or is still running).
	Invalid
	// Valid: the index exists and serves queries.
	Valid
)

// String returns "missing", "invalid" or "valid".
func (s State) String() string {
	switch s {
	case Invalid:
		return "invalid"
	case Valid:
		return "valid"
	}
	return "missing"
}

// Querier is what Read runs on: a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// stateSQL reads the index's validity from the catalog by name, needing
// no privilege on the table (to_regclass would need USAGE on the schema).
const stateSQL = `SELECT x.indisvalid AND x.indisready FROM pg_catalog.pg_index x
	JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
	JOIN pg_catalog.pg_namespace n ON n.oid = i.relnamespace
	WHERE n.nspname = $1 AND i.relname = $2`

// Read returns the state of n's order index, in one catalog query.
func Read(ctx context.Context, q Querier, n sqlname.Names) (State, error) {
	var valid bool
	err := q.QueryRow(ctx, stateSQL, n.Table.Schema, n.Object(sqlname.SuffixOrderIndex)).Scan(&valid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Missing, nil
	case err != nil:
		return Missing, fmt.Errorf("pgoutbox: read the order index of %s: %w", n.Table, err)
	case valid:
		return Valid, nil
	}
	return Invalid, nil
}

// buildingSQL reports whether a CREATE INDEX runs on the table now: a
// backend that pg_stat_progress_create_index lists (its pid and database
// are shown to every role; the relation only to the builder's role and
// pg_read_all_stats) and that holds a lock on the table (pg_locks shows
// every role's).
const buildingSQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_progress_create_index p
	JOIN pg_catalog.pg_locks l ON l.pid = p.pid AND l.locktype = 'relation' AND l.granted
	JOIN pg_catalog.pg_class c ON c.oid = l.relation
	JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE p.datid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		AND l.database = p.datid AND n.nspname = $1 AND c.relname = $2)`

// Building reports whether an index is being built on n's outbox table
// now: an INVALID order index is then most likely that build, not the
// leftover of one that failed.
func Building(ctx context.Context, q Querier, n sqlname.Names) (bool, error) {
	var building bool
	if err := q.QueryRow(ctx, buildingSQL, n.Table.Schema, n.Table.Name).Scan(&building); err != nil {
		return false, fmt.Errorf("pgoutbox: read the index builds of %s: %w", n.Table, err)
	}
	return building, nil
}

// LockKey is the advisory lock key that serializes the builds of n's
// order index (migrations' session lock, a dispatcher's transaction
// lock: the two kinds conflict): two CREATE INDEX CONCURRENTLY on one
// table deadlock, each waiting for the other's snapshot.
func LockKey(n sqlname.Names) string { return "pgoutbox.keyorder:" + n.Table.String() }
