package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The stand-in relay: what the relay scenarios run until relay/ exists
// (relayReplicaMain), and what proves their harness meanwhile. It follows
// docs/relay-design.md in the plainest SQL: a ticker under the ticker
// row's lease, a reader under the cursor row's token lease, a batch is
// the events visible in the newest tick's snapshot and not in the cursor
// tick's, published in one call, then the cursor moved in a statement
// that checks the token and the lease. It is no model of the relay's
// performance, only of its promises.

// errFenced is a cursor move or renewal refused: the token no longer
// holds the group.
var errFenced = errors.New("stand-in relay: lease lost")

// readFakeBatch returns the events of the batch cur → to, by seq.
func readFakeBatch(ctx context.Context, pool *pgxpool.Pool, n sqlname.Names, cur, to int64) ([]outbox.Message, error) {
	ticks := n.Log(sqlname.SuffixTicks)
	rows, err := pool.Query(ctx, `SELECT e.id, e.event_type, e.aggregate_id, e.payload
		FROM `+n.Qualified+` AS e, `+ticks+` AS c, `+ticks+` AS t
		WHERE c.tick_id = $1 AND t.tick_id = $2
		  AND pg_visible_in_snapshot(e.xid, t.snapshot) AND NOT pg_visible_in_snapshot(e.xid, c.snapshot)
		ORDER BY e.seq`, cur, to)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Message, error) {
		var m outbox.Message
		err := row.Scan(&m.Event.ID, &m.Event.Type, &m.Event.AggregateID, &m.Event.Payload)
		return m, err
	})
}

// moveFakeCursor moves group's cursor from cur to to under token, and
// extends its lease by lease; errFenced when the token no longer holds an
// unexpired lease on the group at cur.
func moveFakeCursor(ctx context.Context, pool *pgxpool.Pool, n sqlname.Names, group string, token uuid.UUID,
	cur, to int64, lease time.Duration,
) error {
	tag, err := pool.Exec(ctx, `UPDATE `+n.Log(sqlname.SuffixCursors)+`
		SET last_tick = $4, moved_at = now(), lease_until = now() + make_interval(secs => $5)
		WHERE grp = $1 AND token = $2 AND lease_until > now() AND last_tick = $3`,
		group, token, cur, to, lease.Seconds())
	if err == nil && tag.RowsAffected() != 1 {
		err = errFenced
	}
	return err
}

// fakeRelay is one stand-in replica.
type fakeRelay struct {
	pool  *pgxpool.Pool
	names sqlname.Names
	cfg   relayReplicaConfig
	pub   outbox.Publisher

	tickToken  uuid.UUID
	token      uuid.UUID // the group lease's, uuid.Nil when not held
	renewedAt  time.Time
	pollPeriod time.Duration
}

// runFakeRelay runs the stand-in replica cfg until ctx ends: every 2ms
// it ticks (when cfg.Ticker and it holds or can take the ticker lease)
// and reads one batch (when cfg.Reader and it holds or can take the
// group). Database errors are retried: the server may be restarting.
func runFakeRelay(ctx context.Context, pool *pgxpool.Pool, cfg relayReplicaConfig, pub outbox.Publisher) error {
	names, err := sqlname.For(cfg.Log)
	if err != nil {
		return err
	}
	r := &fakeRelay{pool: pool, names: names, cfg: cfg, pub: pub, tickToken: uuid.New(), pollPeriod: 2 * time.Millisecond}
	for ctx.Err() == nil {
		if cfg.Ticker {
			_ = r.tick(ctx)
		}
		if cfg.Reader {
			if err := r.read(ctx); errors.Is(err, errFenced) {
				r.token = uuid.Nil
			}
		}
		sleepCtx(ctx, r.pollPeriod)
	}
	return nil
}

// tick makes a tick when it holds the ticker lease or can take it: the
// lease row is locked first, and the snapshot taken by a second
// statement, after the lock (docs/relay-design.md 2.2).
func (r *fakeRelay) tick(ctx context.Context) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `UPDATE `+r.names.Log(sqlname.SuffixTicker)+`
			SET owner = $1, token = $2, lease_until = now() + make_interval(secs => $3), heartbeat_at = now(),
				next_tick = next_tick + 1
			WHERE token = $2 OR token IS NULL OR lease_until < now()
			RETURNING next_tick - 1`, r.cfg.Name, r.tickToken, r.cfg.Lease.Seconds()).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another replica ticks
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+r.names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, last_seq, sysid)
			VALUES ($1, pg_current_snapshot(), 0, 0)`, id)
		return err
	})
}

// read takes the group if it does not hold it, then publishes the batch
// from its cursor to the newest tick and moves the cursor; with no new
// tick it renews its lease every third of it.
func (r *fakeRelay) read(ctx context.Context) error {
	if r.token == uuid.Nil {
		return r.take(ctx)
	}
	var cur, to int64
	err := r.pool.QueryRow(ctx, `SELECT c.last_tick, (SELECT max(tick_id) FROM `+r.names.Log(sqlname.SuffixTicks)+`)
		FROM `+r.names.Log(sqlname.SuffixCursors)+` AS c WHERE c.grp = $1 AND c.token = $2`, r.cfg.Group, r.token).Scan(&cur, &to)
	if errors.Is(err, pgx.ErrNoRows) {
		return errFenced
	}
	if err != nil {
		return err
	}
	if to == cur {
		return r.renew(ctx)
	}
	msgs, err := readFakeBatch(ctx, r.pool, r.names, cur, to)
	if err != nil {
		return err
	}
	if len(msgs) > 0 {
		for _, e := range r.pub.Publish(ctx, msgs) {
			if e != nil {
				return e // the broker is down: publish the batch again later
			}
		}
		// A window between the acks and the move wide enough for the
		// scenarios' kills to hit now and then: the duplicates it makes
		// prove the checker's explanations on real processes.
		sleepCtx(ctx, rand.N(10*time.Millisecond))
	}
	if err := moveFakeCursor(ctx, r.pool, r.names, r.cfg.Group, r.token, cur, to, r.cfg.Lease); err != nil {
		return err
	}
	r.renewedAt = time.Now()
	return nil
}

// take takes the group, when free or its lease ended, under a new token.
func (r *fakeRelay) take(ctx context.Context) error {
	tok := uuid.New()
	tag, err := r.pool.Exec(ctx, `UPDATE `+r.names.Log(sqlname.SuffixCursors)+`
		SET owner = $2, token = $3, lease_until = now() + make_interval(secs => $4), heartbeat_at = now()
		WHERE grp = $1 AND (token IS NULL OR lease_until < now())`, r.cfg.Group, r.cfg.Name, tok, r.cfg.Lease.Seconds())
	if err == nil && tag.RowsAffected() == 1 {
		r.token, r.renewedAt = tok, time.Now()
	}
	return err
}

// renew extends the group's lease when a third of it has passed.
func (r *fakeRelay) renew(ctx context.Context) error {
	if time.Since(r.renewedAt) < r.cfg.Lease/3 {
		return nil
	}
	tag, err := r.pool.Exec(ctx, `UPDATE `+r.names.Log(sqlname.SuffixCursors)+`
		SET lease_until = now() + make_interval(secs => $3), heartbeat_at = now()
		WHERE grp = $1 AND token = $2 AND lease_until > now()`, r.cfg.Group, r.token, r.cfg.Lease.Seconds())
	switch {
	case err != nil:
		return err
	case tag.RowsAffected() != 1:
		return errFenced
	}
	r.renewedAt = time.Now()
	return nil
}

// createFakeGroup creates group at the baseline tick (From Oldest), as
// relay.CreateGroup(ctx, pool, log, group, relay.Oldest) will.
func createFakeGroup(ctx context.Context, pool *pgxpool.Pool, log outbox.Table, group string) error {
	n, err := sqlname.For(log)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `INSERT INTO `+n.Log(sqlname.SuffixCursors)+` (grp, last_tick) VALUES ($1, 1)`, group)
	if err != nil {
		return fmt.Errorf("create group %s: %w", group, err)
	}
	return nil
}
