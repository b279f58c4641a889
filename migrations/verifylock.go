package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// VerifyLockError is what [Verify] returns when a lock it needs on one of
// the outbox's tables (the outbox table, its dead letters, its SENT
// history) or one of their indexes stayed held by another session for
// longer than Config.LockTimeout. It names that session, so an operator
// can tell a migration or maintenance command in progress from a
// forgotten transaction. Verify found nothing wrong or right: run it again
// once the lock is gone.
type VerifyLockError struct {
	// Table is the outbox being verified.
	Table outbox.Table
	// Waited is how long Verify waited for the lock.
	Waited time.Duration
	// PID is the backend that held a lock on one of those tables or indexes
	// in a mode that blocks reads (ACCESS EXCLUSIVE), or, when none held
	// one, a backend queued for such a lock (Queued), or 0 when neither
	// was left by the time Verify looked.
	PID int32
	// Queued reports that PID does not hold its lock but waits for it,
	// ahead of Verify: an ALTER TABLE, for one, queues behind any
	// transaction that has read the table, and every later reader of the
	// table, Verify included, queues behind it. The session it waits for
	// is one of SELECT pg_blocking_pids(PID).
	Queued bool
	// Mode is the lock mode it held or waits for, for example
	// "AccessExclusiveLock".
	Mode string
	// ApplicationName and State describe the holder as pg_stat_activity
	// shows it (State only to a superuser, pg_read_all_stats or the same
	// role).
	ApplicationName string
	// State is the holder's state, for example "idle in transaction".
	State string
	// Err is the database's lock_timeout error (SQLSTATE 55P03).
	Err error
}

// Error names the table, the wait and the holder; it contains no
// credentials.
func (e *VerifyLockError) Error() string {
	msg := fmt.Sprintf("pgoutbox: verify %s: waited %s for a lock on the table held by another session", e.Table, e.Waited)
	if e.PID == 0 {
		return msg + " (released since; verify again)"
	}
	if e.Queued {
		return msg + fmt.Sprintf(": backend pid %d is queued for %s ahead of Verify (application_name %q, state %q), "+
			"behind the sessions SELECT pg_blocking_pids(%d) lists; wait for them to finish or end them",
			e.PID, e.Mode, e.ApplicationName, e.State, e.PID)
	}
	return msg + fmt.Sprintf(": backend pid %d holds %s (application_name %q, state %q); "+
		"wait for it to finish or end it with SELECT pg_terminate_backend(%d)", e.PID, e.Mode, e.ApplicationName, e.State, e.PID)
}

// Unwrap returns the database's lock_timeout error.
func (e *VerifyLockError) Unwrap() error { return e.Err }

// relOIDs selects the oids of the relations of schema $1 named in $2.
const relOIDs = `SELECT c.oid FROM pg_catalog.pg_class c
	JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = ANY ($2::text[])`

// relationHolderSQL finds a backend, other than this one, holding a lock
// that blocks reads on one of the tables $1.$2[i] or their indexes, or,
// when none holds one, a backend queued for such a lock (the first to
// ask).
const relationHolderSQL = `SELECT l.pid, l.mode, NOT l.granted, coalesce(a.application_name, ''), coalesce(a.state, '')
FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock' AND l.pid <> pg_backend_pid()
	AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
	AND (l.relation IN (` + relOIDs + `)
		OR l.relation IN (SELECT indexrelid FROM pg_catalog.pg_index WHERE indrelid IN (` + relOIDs + `)))
ORDER BY l.granted DESC
LIMIT 1`

// lockError is the error for a lock that stayed held for waited.
func lockError(ctx context.Context, conn *pgx.Conn, names sqlname.Names, waited time.Duration, cause error) error {
	e := &VerifyLockError{Table: names.Table, Waited: waited, Err: cause}
	tables := []string{names.Table.Name}
	for _, spec := range expectedTables[1:] {
		tables = append(tables, names.Object(spec.suffix))
	}
	tables = append(tables, names.Object(sqlname.SuffixSentDefault))
	err := conn.QueryRow(ctx, relationHolderSQL, names.Table.Schema, tables).
		Scan(&e.PID, &e.Mode, &e.Queued, &e.ApplicationName, &e.State)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (looking up the holder: %w)", e, err)
	}
	return e
}
