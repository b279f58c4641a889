package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
)

// ErrNoOrderIndex is matched by the error Start returns when the
// dispatcher has Ordering PerKey, the outbox table has no valid per-key
// order index, and Start could not build it (the error is an
// *OrderIndexError). Since schema version 12 the index exists only where
// migrations.Config.KeyOrder is set or a PerKey dispatcher built it.
var ErrNoOrderIndex = errors.New("pgoutbox: no order index")

// OrderIndexError says that the outbox table lacks the per-key order
// index that Ordering PerKey reads (its claim probes each key's head
// through it), why Start did not build it, and how to build it. It
// matches ErrNoOrderIndex.
type OrderIndexError struct {
	// Table is the outbox table, schema-qualified.
	Table string
	// Index is the order index, schema-qualified.
	Index string
	// Invalid is true when the index exists but is INVALID (a CREATE
	// INDEX CONCURRENTLY that failed, or one still running); false when
	// it is missing.
	Invalid bool
	// Create is the statement that builds the index without blocking
	// writes, and Drop the one that drops an invalid one first (run each
	// outside a transaction).
	Create, Drop string
	// Cause is why Start's own build failed: the role does not own the
	// table or may not create in its schema (42501), a statement or lock
	// timeout ended it, Start's context ended while it waited for the
	// build, or builds kept failing.
	Cause error
}

func (e *OrderIndexError) Error() string {
	state, fix := "missing", "run "+e.Create
	if e.Invalid {
		state = "INVALID (a CREATE INDEX CONCURRENTLY that failed or is running)"
		fix = "once no build runs, " + e.Drop + "; then " + e.Create
	}
	msg := fmt.Sprintf("pgoutbox: dispatcher: Ordering PerKey needs the order index %s of table %s, which is %s "+
		"(set migrations.Config.KeyOrder and run migrations.Migrate, which builds it without blocking writes; or %s; see docs/ordering.md)",
		e.Index, e.Table, state, fix)
	if e.Cause != nil {
		msg += "; building it at Start failed: " + e.Cause.Error()
	}
	return msg
}

// Is makes an *OrderIndexError match ErrNoOrderIndex.
func (e *OrderIndexError) Is(target error) bool { return target == ErrNoOrderIndex }

// Unwrap returns Cause.
func (e *OrderIndexError) Unwrap() error { return e.Cause }

// checkOrderIndex makes sure a dispatcher with Ordering PerKey has a
// valid order index (schema version 12 drops it unless
// migrations.Config.KeyOrder): when it is missing or INVALID, it builds
// it (buildOrderIndex), and when that fails it refuses the start. Other
// dispatchers do not read it. A read that runs out of time is skipped,
// as checkAccess's is: statement timeouts must never stop progress.
func (d *Dispatcher) checkOrderIndex(ctx context.Context, names sqlname.Names) error {
	if d.cfg.Ordering != PerKey {
		return nil
	}
	state, err := keyorder.Read(ctx, d.pool, names)
	switch {
	case err != nil && ranOutOfTime(err) && ctx.Err() == nil:
		return nil
	case err != nil:
		return errtext.Wrap(err, "dispatcher: check the order index")
	case state == keyorder.Valid:
		return nil
	}
	cause := d.buildOrderIndex(ctx, names)
	if cause == nil {
		return nil
	}
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	state, _ = keyorder.Read(readCtx, d.pool, names)
	return &OrderIndexError{Table: names.Table.String(), Index: names.Table.Schema + "." + names.Object(sqlname.SuffixOrderIndex),
		Invalid: state == keyorder.Invalid, Create: keyorder.Create(names), Drop: keyorder.Drop(names), Cause: cause}
}

// orderIndexAttempts bounds buildOrderIndex's builds and drops (waits for
// another session's build, and builds that lost a deadlock to another
// replica's, do not count).
const orderIndexAttempts = 4

// orderIndexPoll is how often buildOrderIndex looks again while another
// session builds an index on the table.
const orderIndexPoll = 200 * time.Millisecond

// buildOrderIndex makes the order index valid, one autocommit statement
// at a time (so behind a transaction-mode pooler too), until ctx ends:
// while any index is being built on the table (a Migrate with KeyOrder,
// another replica, an operator; read before the index's state, so that a
// build that ends between the two reads is not taken for a failed one)
// it waits for that build; an INVALID index with no build running (one
// that failed) it drops; a missing one it builds with CREATE INDEX
// CONCURRENTLY, which blocks no Emit, claim or completion but waits for
// the transactions open in the database that could see the table. It
// logs a WARN when it starts to build or wait, since Start waits with
// it, and an INFO when the index is valid. One build at a time
// (execAlone): replicas and a Migrate starting at once wait for each
// other's build rather than deadlock. Building needs the
// table's ownership and CREATE on its schema; a role without them gets
// 42501, and a statement or lock timeout shorter than the build gives
// up at once: Start refuses with the statement to run.
func (d *Dispatcher) buildOrderIndex(ctx context.Context, names sqlname.Names) error {
	began := time.Now()
	warned := false
	var last error
	for attempts := 0; ; {
		building, err := keyorder.Building(ctx, d.pool, names)
		if err != nil {
			return err
		}
		state, err := keyorder.Read(ctx, d.pool, names)
		if err != nil {
			return err
		}
		if state == keyorder.Valid {
			d.cfg.Logger.Info("pgoutbox: the per-key order index that Ordering PerKey reads is valid; set "+
				"migrations.Config.KeyOrder to build it when migrating", "table", names.Table.String(),
				"waited", time.Since(began).Round(time.Millisecond))
			return nil
		}
		if !warned {
			warned = true
			d.cfg.Logger.Warn("pgoutbox: Ordering PerKey needs the per-key order index: Start builds it (CREATE INDEX "+
				"CONCURRENTLY) or waits for its build, which waits for the transactions open in the database",
				"table", names.Table.String(), "index", state.String(), "another_build", building)
		}
		if building {
			if err := tmplmigrate.Sleep(ctx, orderIndexPoll); err != nil {
				return fmt.Errorf("waiting for a build of an index on %s: %w", names.Table, err)
			}
			continue
		}
		if attempts == orderIndexAttempts {
			return cmp.Or(last, errors.New("the order index stayed invalid"))
		}
		stmt := keyorder.Create(names)
		if state == keyorder.Invalid {
			stmt = keyorder.Drop(names)
		}
		var got bool
		got, last = d.execAlone(ctx, names, stmt)
		if !got && last == nil {
			if err := tmplmigrate.Sleep(ctx, orderIndexPoll); err != nil {
				return fmt.Errorf("waiting for another build of the order index of %s: %w", names.Table, err)
			}
			continue // another replica or Migrate builds it
		}
		switch pgerr.Code(last) {
		case pgerr.InsufficientPrivilege, pgerr.QueryCanceled, pgerr.LockNotAvailable:
			return last
		case pgerr.DeadlockDetected:
			continue // another replica's build won: wait for it
		}
		if ctx.Err() != nil {
			return cmp.Or(last, context.Cause(ctx))
		}
		attempts++
	}
}

// execAlone runs stmt (a build or drop of the order index, autocommit)
// on a connection of its own while that session holds the builds'
// advisory lock (keyorder.LockKey, taken with pg_try_advisory_lock in
// autocommit, so no snapshot is held that the build would wait for), so
// that at most one build of the index runs at a time (two CREATE INDEX
// CONCURRENTLY on one table deadlock). got is false, and nothing ran,
// when another session holds the lock. A connection whose unlock did
// not take (behind a transaction-mode pooler the unlock may reach
// another server session) is closed rather than returned to the pool;
// a build cut short by ctx closes it too, which ends its session and
// its lock.
func (d *Dispatcher) execAlone(ctx context.Context, names sqlname.Names, stmt string) (got bool, err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	key := keyorder.LockKey(names)
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&got); err != nil || !got {
		return false, err
	}
	_, err = conn.Exec(ctx, stmt)
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var unlocked bool
	if uerr := conn.QueryRow(unlockCtx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key).Scan(&unlocked); uerr != nil || !unlocked {
		_ = conn.Conn().Close(unlockCtx)
	}
	return true, err
}
