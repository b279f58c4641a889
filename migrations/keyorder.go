package migrations

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
)

// keyOrderPoll is how often ensureKeyOrder tries again for the lock that
// another Migrate building the index holds.
const keyOrderPoll = 200 * time.Millisecond

// ensureKeyOrder makes sure the outbox table's order index exists and is
// valid (Config.KeyOrder), building it with CREATE INDEX CONCURRENTLY
// outside a transaction, after dropping an INVALID one that a failed
// concurrent build left (DROP INDEX CONCURRENTLY). One Migrate of the
// table does this at a time: it holds a session advisory lock keyed by
// the table, taken with pg_try_advisory_lock polled every keyOrderPoll
// until ctx ends (a session blocked in pg_advisory_lock would hold a
// snapshot the concurrent build waits for, a deadlock), so that a second
// Migrate waits for the first one's build and then finds the index
// valid, rather than dropping it as invalid while it is being built; and
// before it drops an INVALID index it waits for any build on the table
// (waitForBuilds: a PerKey dispatcher builds it without that lock).
func ensureKeyOrder(ctx context.Context, c *pgx.Conn, names sqlname.Names) (err error) {
	if state, err := keyorder.Read(ctx, c, names); err != nil || state == keyorder.Valid {
		return errtext.Wrap(err, "migrations")
	}
	unlock, err := lockKeyOrder(ctx, c, names)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := unlock(); err == nil && uerr != nil {
			err = errtext.Wrap(uerr, "migrations: order index of %s: advisory unlock", names.Table)
		}
	}()
	state, err := waitForBuilds(ctx, c, names)
	if err != nil || state == keyorder.Valid {
		return errtext.Wrap(err, "migrations")
	}
	if state == keyorder.Invalid {
		if _, err := c.Exec(ctx, keyorder.Drop(names)); err != nil {
			return errtext.Wrap(err, "migrations: drop the invalid order index of %s", names.Table)
		}
	}
	if _, err := c.Exec(ctx, keyorder.Create(names)); err != nil {
		dropFailedBuild(ctx, c, names)
		return errtext.Wrap(err, "migrations: build the order index of %s (Config.KeyOrder; run Migrate again)", names.Table)
	}
	if state, err = keyorder.Read(ctx, c, names); err == nil && state != keyorder.Valid {
		err = fmt.Errorf("pgoutbox: migrations: the order index of %s is %s after CREATE INDEX CONCURRENTLY", names.Table, state)
	}
	return err
}

// lockKeyOrder takes the session advisory lock that serializes the order
// index's builds of names' table, trying every keyOrderPoll until ctx
// ends, and returns its release.
func lockKeyOrder(ctx context.Context, c *pgx.Conn, names sqlname.Names) (func() error, error) {
	key := keyorder.LockKey(names)
	for {
		var got bool
		err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&got)
		if err != nil {
			return nil, errtext.Wrap(err, "migrations: order index of %s: advisory lock", names.Table)
		}
		if got {
			return func() error {
				_, err := c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
				return err
			}, nil
		}
		if err := tmplmigrate.Sleep(ctx, keyOrderPoll); err != nil {
			return nil, fmt.Errorf("pgoutbox: migrations: waiting for another Migrate building the order index of %s: %w",
				names.Table, err)
		}
	}
}

// dropFailedBuild drops the INVALID index a failed build left (unless
// another session builds one on the table now), so that an ordered
// dispatcher does not find an index that serves nothing and writes
// still maintain. Best effort, within a minute of its own even when ctx
// has ended: a dispatcher with Ordering PerKey or the next Migrate drop
// it otherwise.
func dropFailedBuild(ctx context.Context, c *pgx.Conn, names sqlname.Names) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if building, err := keyorder.Building(ctx, c, names); err != nil || building {
		return
	}
	if state, err := keyorder.Read(ctx, c, names); err == nil && state == keyorder.Invalid {
		_, _ = c.Exec(ctx, keyorder.Drop(names))
	}
}

// waitForBuilds waits, polling every keyOrderPoll until ctx ends, while
// an index is being built on names' table (a dispatcher with Ordering
// PerKey builds the order index at Start without the advisory lock), and
// then returns the order index's state: an INVALID index is then the
// leftover of a build that failed, not one under way.
func waitForBuilds(ctx context.Context, c *pgx.Conn, names sqlname.Names) (keyorder.State, error) {
	for {
		building, err := keyorder.Building(ctx, c, names)
		if err != nil {
			return keyorder.Missing, err
		}
		if !building {
			return keyorder.Read(ctx, c, names)
		}
		if err := tmplmigrate.Sleep(ctx, keyOrderPoll); err != nil {
			return keyorder.Missing, fmt.Errorf("pgoutbox: migrations: waiting for a build of an index on %s: %w",
				names.Table, err)
		}
	}
}
