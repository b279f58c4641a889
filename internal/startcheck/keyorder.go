package startcheck

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

// checkOrderIndex makes sure a dispatcher with Ordering PerKey has a
// valid order index (schema version 12 drops it unless
// migrations.Config.KeyOrder): when it is missing or INVALID, it builds
// it (buildOrderIndex), and when that fails it refuses the start. Other
// dispatchers do not read it. A read that runs out of time is skipped,
// as checkAccess's is: statement timeouts must never stop progress.
func (c *Checker) checkOrderIndex(ctx context.Context, names sqlname.Names) error {
	if !c.cfg.PerKey {
		return nil
	}
	state, err := keyorder.Read(ctx, c.cfg.Pool, names)
	switch {
	case err != nil && pgerr.RanOutOfTime(err) && ctx.Err() == nil:
		return nil
	case err != nil:
		return errtext.Wrap(err, "dispatcher: check the order index")
	case state == keyorder.Valid:
		return nil
	}
	cause := c.buildOrderIndex(ctx, names)
	if cause == nil {
		return nil
	}
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	state, _ = keyorder.Read(readCtx, c.cfg.Pool, names)
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
func (c *Checker) buildOrderIndex(ctx context.Context, names sqlname.Names) error {
	began := c.cfg.Now()
	warned := false
	var last error
	for attempts := 0; ; {
		building, err := keyorder.Building(ctx, c.cfg.Pool, names)
		if err != nil {
			return err
		}
		state, err := keyorder.Read(ctx, c.cfg.Pool, names)
		if err != nil {
			return err
		}
		if state == keyorder.Valid {
			c.cfg.Logger.Info("pgoutbox: the per-key order index that Ordering PerKey reads is valid; set "+
				"migrations.Config.KeyOrder to build it when migrating", "table", names.Table.String(),
				"waited", c.cfg.Now().Sub(began).Round(time.Millisecond))
			return nil
		}
		if !warned {
			warned = true
			c.cfg.Logger.Warn("pgoutbox: Ordering PerKey needs the per-key order index: Start builds it (CREATE INDEX "+
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
		got, last = c.execAlone(ctx, names, stmt)
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
func (c *Checker) execAlone(ctx context.Context, names sqlname.Names, stmt string) (got bool, err error) {
	conn, err := c.cfg.Pool.Acquire(ctx)
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
