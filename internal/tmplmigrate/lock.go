package tmplmigrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DefaultLockWait is how long Migrate waits for its advisory locks when
// the Set gives no wait: longer than a migration that retries a locked
// table takes (about 20s), short enough that a lock left behind by a
// pooled connection is reported instead of hanging a deploy.
const DefaultLockWait = time.Minute

// ternLockKey is the session advisory lock tern's Migrator takes around
// its work (migrate.lockNum in tern v2): one key for every tern migration
// in the database. Migrate takes it first with a bounded wait; tern's own
// pg_advisory_lock on the same session then returns at once, since
// session advisory locks nest.
const ternLockKey = int64(9628173550095224)

// advisoryLock is one session advisory lock Migrate holds while it runs.
type advisoryLock struct {
	name string // for errors: "pgoutbox" or "tern"
	key  int64
}

// locks returns the locks Migrate takes for table, in the order it takes
// them: its own, keyed by the table's name, then tern's.
func locks(ctx context.Context, conn *pgx.Conn, table outbox.Table) ([]advisoryLock, error) {
	var key int64
	err := conn.QueryRow(ctx, "SELECT hashtextextended($1, 0)", "pgoutbox.migrate:"+table.String()).Scan(&key)
	if err != nil {
		return nil, errtext.Wrap(err, "migrate %s: advisory lock key", table)
	}
	return []advisoryLock{{"pgoutbox", key}, {"tern", ternLockKey}}, nil
}

// lockAll takes every lock of ls on conn, waiting at most wait for all of
// them together. It returns the release function of the locks it took,
// which is also to be called when it fails.
func lockAll(ctx context.Context, conn *pgx.Conn, table outbox.Table, ls []advisoryLock, wait time.Duration) (func() error, error) {
	var held []advisoryLock
	release := func() error {
		var errs []error
		for _, l := range held {
			_, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", l.key)
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	deadline := time.Now().Add(wait)
	for _, l := range ls {
		if err := lockWithin(ctx, conn, table, l, time.Until(deadline), wait); err != nil {
			return release, err
		}
		held = append(held, l)
	}
	return release, nil
}

// lockWithin takes the session advisory lock l on conn, waiting at most
// left: it sets lock_timeout for one transaction around pg_advisory_lock
// (a session lock outlives the transaction it was taken in), so the
// caller's session settings stay as they were. When the wait runs out it
// returns a *LockError naming the backend that holds l;
// waited is what the error reports as the whole wait.
func lockWithin(ctx context.Context, conn *pgx.Conn, table outbox.Table, l advisoryLock, left, waited time.Duration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return errtext.Wrap(err, "migrate %s: advisory lock", table)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	timeout := fmt.Sprintf("%dms", max(left.Milliseconds(), 1)) // 0 would mean no limit
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", timeout); err != nil {
		return errtext.Wrap(err, "migrate %s: advisory lock", table)
	}
	_, err = tx.Exec(ctx, "SELECT pg_advisory_lock($1)", l.key)
	if pgerr.Code(err) == pgerr.LockNotAvailable {
		_ = tx.Rollback(ctx)
		return holderError(ctx, conn, table, l, waited, err)
	}
	if err != nil {
		return errtext.Wrap(err, "migrate %s: %s advisory lock", table, l.name)
	}
	if err := tx.Commit(ctx); err != nil {
		return errtext.Wrap(err, "migrate %s: %s advisory lock", table, l.name)
	}
	return nil
}

// holderSQL finds the backend that holds the session advisory lock whose
// bigint key is $1 in the current database: pg_locks shows such a key as
// classid (high 32 bits), objid (low 32 bits) and objsubid 1.
const holderSQL = `SELECT l.pid, coalesce(a.application_name, ''),
	coalesce(host(a.client_addr) || ':' || a.client_port, ''),
	coalesce(a.usename::text, ''), coalesce(a.state, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid::text::bigint = ($1::bigint >> 32) & 4294967295
	AND l.objid::text::bigint = $1::bigint & 4294967295
LIMIT 1`

// holderError is the error for a lock l that stayed held for waited,
// naming its holder as pg_locks and pg_stat_activity show it.
func holderError(ctx context.Context, conn *pgx.Conn, table outbox.Table, l advisoryLock, waited time.Duration, cause error) error {
	e := &LockError{Table: table, Lock: l.name, Waited: waited, Err: cause}
	err := conn.QueryRow(ctx, holderSQL, l.key).Scan(&e.PID, &e.ApplicationName, &e.ClientAddr, &e.User, &e.State)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (looking up the holder: %w)", e, err)
	}
	return e
}
