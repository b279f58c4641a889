package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestRelayChaosPlumbing proves the relay scenarios' writer side, records
// and checker without the relay: an in-test ticker inserts a tick (the
// snapshot of its statement) every few milliseconds, and an in-test
// reader reads batches the way docs/relay-design.md 3.1 says (visible in
// the newest tick's snapshot, not in the cursor tick's, by seq),
// publishes them through the recordingPublisher and moves the cursor
// under its token. Writers commit out of order across ticks, roll back
// on purpose and in savepoints, and one transaction stays open across
// 100 ticks. Once, the reader "dies" between the acks of a batch and its
// move: its successor takes the group with a new token and publishes the
// batch again. CheckRelay must find no violation and explain the
// duplicates by that kill; fed the same records minus one ack, or plus
// an ack of a rolled back event, it must find the loss and the
// unexpected event.
func TestRelayChaosPlumbing(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db := pgtest.New(t)
	h := newRelayHarness(t, ctx, db.Pool, db.Schema, 6)
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+h.names.Log(sqlname.SuffixCursors)+` (grp, last_tick) VALUES ('g', 1)`)
	require.NoError(t, err)

	tickCtx, stopTicks := context.WithCancel(ctx)
	ticking := runFakeTicker(tickCtx, h)
	defer func() { stopTicks(); <-ticking }()

	// The long transaction emits first, so that the writers' events of
	// later seq commit in earlier ticks; it commits 100 ticks later.
	emitted := make(chan struct{})
	var longErr error
	var longDone sync.WaitGroup
	longDone.Go(func() {
		longErr = h.holdOpen(ctx, db.Pool, func(ctx context.Context) error {
			close(emitted)
			return h.ticksPass(100)(ctx)
		})
	})
	<-emitted
	writers := h.startWriters(ctx, db.Pool, 4, 25)

	rd := &fakeReader{h: h, group: "g", killAfter: 3}
	var stopAt atomic.Int64 // the tick the reader reads up to; 0 until known
	readErr := make(chan error, 1)
	go func() { readErr <- rd.run(ctx, &stopAt) }()

	writers.Wait()
	longDone.Wait()
	require.NoError(t, longErr)
	faultsEnded := time.Now()
	last, err := h.lastTick(ctx)
	require.NoError(t, err)
	// Tick last+1 may have taken its snapshot before the last commits
	// (its statement can have begun before them and committed after we
	// read last); the fake ticker is sequential, so tick last+2's began
	// after, and its snapshot shows every commit. (CI at load 20 saw the
	// reader stop at last+1 with events undelivered.)
	end, err := h.awaitTick(ctx, last+2)
	require.NoError(t, err)
	stopAt.Store(end)
	require.NoError(t, <-readErr)
	drained := h.awaitRelayDrain(ctx)
	require.False(t, drained.IsZero(), "the in-test reader did not deliver every committed event")

	in := h.relayInput(ctx, "g", faultsEnded, drained)
	rep := chaos.CheckRelay(in)
	t.Logf("plumbing:\n%s", rep)
	require.Empty(t, rep.Violations(), rep.String())
	require.GreaterOrEqual(t, rep.Events, 4*25/2, "too few commits")
	require.Positive(t, rep.RolledBack, "no rollback on purpose happened")
	require.NotEmpty(t, rep.Duplicates, "the reader's kill republished nothing")
	for _, d := range rep.Duplicates {
		require.True(t, d.Explained)
		require.Contains(t, d.Cause, "kill of r1.1")
	}
	requireLongAcrossTicks(t, ctx, h, 100)
	requireOutOfOrderCommits(t, ctx, h)

	// The records are what the checker judges: one ack fewer is a loss,
	// one ack of a rolled back event is unexpected.
	onlyOnce := slices.IndexFunc(in.Deliveries, func(d chaos.Delivery) bool {
		return slices.IndexFunc(in.Deliveries, func(o chaos.Delivery) bool { return o.ID == d.ID && o != d }) < 0
	})
	require.GreaterOrEqual(t, onlyOnce, 0)
	broken := in
	broken.Deliveries = slices.Delete(slices.Clone(in.Deliveries), onlyOnce, onlyOnce+1)
	rolled := in.RolledBack[0]
	broken.Deliveries = append(broken.Deliveries, chaos.Delivery{ID: rolled, Key: "k1", V: 1, Replica: "r1.2", At: time.Now()})
	bad := chaos.CheckRelay(broken)
	require.Len(t, bad.Lost, 1, bad.String())
	require.Equal(t, in.Deliveries[onlyOnce].ID, bad.Lost[0].ID)
	require.Len(t, bad.Unexpected, 1, bad.String())
	require.Contains(t, bad.Unexpected[0].Reason, "rolled back on purpose")
}

// requireLongAcrossTicks checks that the long transaction's event first
// became visible at least n ticks after the first tick that saw its
// transaction running.
func requireLongAcrossTicks(t *testing.T, ctx context.Context, h *relayHarness, n int64) {
	t.Helper()
	var began, visible int64
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT
		(SELECT min(tick_id) FROM `+h.qualified("chaos_ticks")+` AS t
			WHERE pg_snapshot_xmax(t.snapshot::pg_snapshot) > l.xid),
		(SELECT min(tick_id) FROM `+h.qualified("chaos_ticks")+` AS t
			WHERE pg_visible_in_snapshot(l.xid, t.snapshot::pg_snapshot))
		FROM `+h.qualified("relay_ledger")+` AS l WHERE l.key = $1`, relayLongKey).Scan(&began, &visible))
	require.GreaterOrEqual(t, visible-began, n, "the long transaction was open across too few ticks")
}

// requireOutOfOrderCommits checks that some event of a higher seq
// became visible in an earlier tick than one of a lower seq: commits
// came out of insert order across ticks.
func requireOutOfOrderCommits(t *testing.T, ctx context.Context, h *relayHarness) {
	t.Helper()
	var n int
	require.NoError(t, h.pool.QueryRow(ctx, `WITH e AS (
		SELECT l.seq, (SELECT min(tick_id) FROM `+h.qualified("chaos_ticks")+` AS t
			WHERE pg_visible_in_snapshot(l.xid, t.snapshot::pg_snapshot)) AS tick
		FROM `+h.qualified("relay_ledger")+` AS l)
		SELECT count(*) FROM e AS a JOIN e AS b ON a.seq < b.seq AND a.tick > b.tick`).Scan(&n))
	require.Positive(t, n, "every commit came in insert order")
}

// runFakeTicker inserts a tick every 2ms until ctx ends, as one ticker
// alone would (no lease: nothing else ticks). The channel closes when it
// stopped.
func runFakeTicker(ctx context.Context, h *relayHarness) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = h.pool.Exec(ctx, `WITH n AS (UPDATE `+h.names.Log(sqlname.SuffixTicker)+`
				SET next_tick = next_tick + 1 RETURNING next_tick - 1 AS id)
				INSERT INTO `+h.names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, last_seq, sysid)
				SELECT id, pg_current_snapshot(), 0, 0 FROM n`)
			sleepCtx(ctx, 2*time.Millisecond)
		}
	}()
	return done
}

// fakeReader is the in-test stand-in for the relay's reader: one group,
// one incarnation at a time ("r1.1", "r1.2", ...), each taking the group
// under a token of its own.
type fakeReader struct {
	h     *relayHarness
	group string
	// killAfter is how many batches with events the first incarnation
	// moves before it "dies" between the acks of the next one and its
	// move.
	killAfter int

	name    string
	n       int
	token   uuid.UUID
	pub     *recordingPublisher
	batches int
}

// run reads batches until the cursor reached the tick stopAt holds (once
// set).
func (r *fakeReader) run(ctx context.Context, stopAt *atomic.Int64) error {
	if err := r.incarnate(ctx); err != nil {
		return err
	}
	for {
		cur, to, err := r.next(ctx)
		if err != nil {
			return err
		}
		if to == cur {
			if end := stopAt.Load(); end != 0 && cur >= end {
				return nil
			}
			sleepCtx(ctx, 2*time.Millisecond)
			continue
		}
		n, err := r.publish(ctx, cur, to)
		if err != nil {
			return err
		}
		if n > 0 && r.n == 1 && r.batches == r.killAfter {
			r.h.recordKill(r.name, time.Now(), "in-test reader deaths")
			if err := r.incarnate(ctx); err != nil {
				return err
			}
			continue
		}
		if n > 0 {
			r.batches++
		}
		if err := r.move(ctx, cur, to); err != nil {
			return err
		}
	}
}

// incarnate starts the next incarnation: a new name, record file and
// token, which takes the group.
func (r *fakeReader) incarnate(ctx context.Context) error {
	r.n++
	r.name, r.token = fmt.Sprintf("r1.%d", r.n), uuid.New()
	rec, err := chaos.NewRecorder(r.h.deliveryPath(r.name), r.name)
	if err != nil {
		return err
	}
	r.h.t.Cleanup(func() { _ = rec.Close() })
	r.pub = &recordingPublisher{rec: rec}
	_, err = r.h.pool.Exec(ctx, `UPDATE `+r.h.names.Log(sqlname.SuffixCursors)+`
		SET owner = $2, token = $3, lease_until = now() + interval '1 minute', heartbeat_at = now()
		WHERE grp = $1`, r.group, r.name, r.token)
	return err
}

// next returns the cursor tick and the newest tick.
func (r *fakeReader) next(ctx context.Context) (cur, to int64, err error) {
	err = r.h.pool.QueryRow(ctx, `SELECT c.last_tick, (SELECT max(tick_id) FROM `+r.h.names.Log(sqlname.SuffixTicks)+`)
		FROM `+r.h.names.Log(sqlname.SuffixCursors)+` AS c WHERE c.grp = $1`, r.group).Scan(&cur, &to)
	return cur, to, err
}

// publish reads the batch cur → to and publishes it in one call; it
// returns how many events it held.
func (r *fakeReader) publish(ctx context.Context, cur, to int64) (int, error) {
	msgs, err := readFakeBatch(ctx, r.h.pool, r.h.names, cur, to)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	for _, e := range r.pub.Publish(ctx, msgs) {
		if e != nil {
			return 0, e
		}
	}
	return len(msgs), nil
}

// move moves the cursor from cur to to under the reader's token.
func (r *fakeReader) move(ctx context.Context, cur, to int64) error {
	return moveFakeCursor(ctx, r.h.pool, r.h.names, r.group, r.token, cur, to, time.Minute)
}

// TestSwitchBrokerRefusesWhileDown: the broker scenario's switch.
func TestSwitchBrokerRefusesWhileDown(t *testing.T) {
	t.Parallel()
	h := &relayHarness{t: t, dir: t.TempDir(), faults: map[string]int{}}
	b := switchBroker{down: h.brokerSwitch()}
	msgs := []outbox.Message{{Event: relayEvent(uuid.New(), "k1", 1)}}
	require.Equal(t, []error{nil}, b.Publish(context.Background(), msgs))
	h.brokerDown(0) // down and up again
	require.Equal(t, []error{nil}, b.Publish(context.Background(), msgs))
	require.NoError(t, os.WriteFile(h.brokerSwitch(), nil, 0o644))
	require.ErrorIs(t, b.Publish(context.Background(), msgs)[0], outbox.ErrUnavailable)
	require.Equal(t, 1, h.faults["broker outages"])
}

// TestCursorLogRecordsMoves: the cursor log of a log made by
// migrations.Migrate records a group's creation, its take, its moves (a
// full one and a partial one) and its drop, each with the row before and
// after, and neither a lease renewal nor a move rolled back; the tick
// copy holds the baseline tick and every tick inserted after.
func TestCursorLogRecordsMoves(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	db := pgtest.New(t)
	h := newRelayHarness(t, ctx, db.Pool, db.Schema, 1)
	cursors := h.names.Log(sqlname.SuffixCursors)
	tok := uuid.New()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`INSERT INTO ` + cursors + ` (grp, last_tick) VALUES ('g', 1)`)
	conn, err := db.Pool.Acquire(ctx) // a session named r1 takes the group
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET application_name = 'r1'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE `+cursors+` SET owner = 'r1', token = $1, lease_until = now() + interval '1 minute' WHERE grp = 'g'`, tok)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `RESET application_name`)
	require.NoError(t, err)
	conn.Release()
	exec(`UPDATE ` + cursors + ` SET lease_until = now() + interval '2 minutes', heartbeat_at = now() WHERE grp = 'g'`) // a renewal
	exec(`UPDATE ` + cursors + ` SET last_tick = 2 WHERE grp = 'g'`)
	exec(`UPDATE ` + cursors + ` SET batch_tick = 5, batch_seq = 40 WHERE grp = 'g'`)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE `+cursors+` SET last_tick = 9 WHERE grp = 'g'`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	exec(`DELETE FROM ` + cursors)
	tickCtx, stopTicks := context.WithCancel(ctx)
	ticking := runFakeTicker(tickCtx, h)
	_, err = h.awaitTick(ctx, 3)
	stopTicks()
	<-ticking
	require.NoError(t, err)

	log, err := chaos.ReadCursorLog(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, log, 5)
	require.Equal(t, []string{"INSERT", "UPDATE", "UPDATE", "UPDATE", "DELETE"},
		[]string{log[0].Op, log[1].Op, log[2].Op, log[3].Op, log[4].Op})
	require.Equal(t, int64(1), log[0].NewLastTick)
	require.True(t, log[1].Take())
	require.Equal(t, tok, log[1].NewToken)
	require.Equal(t, "r1", log[1].NewOwner)
	require.True(t, log[2].Move())
	require.Equal(t, [2]int64{1, 2}, [2]int64{log[2].OldLastTick, log[2].NewLastTick})
	require.Equal(t, tok, log[2].OldToken)
	require.True(t, log[2].StatementAt.Before(log[2].OldLeaseUntil), "the lease before the move is logged")
	require.False(t, log[2].XactAt.IsZero() || log[2].XactAt.After(log[2].StatementAt), "the transaction start is logged")
	require.True(t, log[3].Move(), "a partial move is a move")
	require.Equal(t, [2]int64{5, 40}, [2]int64{log[3].NewBatchTick, log[3].NewBatchSeq})
	require.Equal(t, "g", log[4].Group)
	require.Equal(t, "r1", log[1].Writer)

	ticks, err := chaos.ReadTicks(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ticks), 3)
	require.Equal(t, int64(1), ticks[0].ID, "the baseline tick is copied at install")
	require.Regexp(t, `^\d+:\d+:[\d,]*$`, ticks[1].Snapshot)
}

// errFenced is a cursor move refused: the token no longer
// holds the group.
var errFenced = errors.New("in-test reader: lease lost")

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
