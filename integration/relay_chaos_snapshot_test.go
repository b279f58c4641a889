package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
	"github.com/pgoutbox/pgoutbox/integration/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/relay"
)

// injectBackwardsSQL creates, in schema %[1]s, the switch chaos_inject
// and a BEFORE INSERT trigger on the log's ticks table %[2]s: once armed,
// the next tick gets the snapshot of the baseline tick 1 (from the tick
// copy chaos_ticks, which retention does not delete), older than every
// tick since: a restore of an older backup, as the relay sees it. The
// trigger records the tick, and refuses every later tick, so that the
// injected one stays the newest until the relay reads it (a batch that
// jumps over a tick does not read its snapshot). The tick copy's AFTER
// trigger copies the injected snapshot: the checker sees it too.
const injectBackwardsSQL = `
CREATE TABLE %[1]s.chaos_inject (armed boolean NOT NULL, tick_id bigint);
INSERT INTO %[1]s.chaos_inject VALUES (false, NULL);
CREATE FUNCTION %[1]s.chaos_inject_backwards() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	v %[1]s.chaos_inject;
BEGIN
	SELECT * INTO v FROM %[1]s.chaos_inject FOR UPDATE;
	IF v.tick_id IS NOT NULL THEN
		RAISE EXCEPTION 'chaos: no tick after the injected tick %%', v.tick_id;
	END IF;
	IF v.armed THEN
		NEW.snapshot := (SELECT snapshot::pg_snapshot FROM %[1]s.chaos_ticks WHERE tick_id = 1);
		UPDATE %[1]s.chaos_inject SET tick_id = NEW.tick_id;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER chaos_inject_backwards BEFORE INSERT ON %[2]s FOR EACH ROW
	EXECUTE FUNCTION %[1]s.chaos_inject_backwards();
`

// TestChaosRelaySnapshotBackwards: one relay (ticker and reader) in this
// process, 3 writers, the long transaction; once it committed, one tick
// is written with an older snapshot (injectBackwardsSQL). The group must
// stop with relay.ErrSnapshotBackwards, its cursor before the injected
// tick; nothing committed after the tick before it may be published,
// nothing before the cursor lost. The checker must flag the injected tick
// and nothing else but the events the stop holds back.
func TestChaosRelaySnapshotBackwards(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	cluster := pgcluster.Start(t)
	pool := chaosPool(t, ctx, cluster.URL, "checker")
	h := newRelayHarness(t, ctx, pool, relayChaosSchema, 8)
	require.NoError(t, createRelayGroups(ctx, pool, h.log, relayGroup, false))
	_, err := pool.Exec(ctx, fmt.Sprintf(injectBackwardsSQL, pgx.Identifier{relayChaosSchema}.Sanitize(), h.names.Log(sqlname.SuffixTicks)))
	require.NoError(t, err)

	const name = "r1.1"
	rec, err := chaos.NewRecorder(h.deliveryPath(name), name)
	require.NoError(t, err)
	defer func() { _ = rec.Close() }()
	cfg := relayConfig(chaosPool(t, ctx, cluster.URL, name),
		relayReplicaConfig{Name: name, Log: h.log, Group: relayGroup, Lease: time.Second, Ticker: true, Reader: true},
		&recordingPublisher{rec: rec})
	cfg.Logger = quietLogger() // the stop's ERROR is this test's expected result
	r, err := relay.New(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	defer func() { _ = r.Stop(context.Background()) }()

	writerPool := chaosPool(t, ctx, cluster.URL, "writers")
	writeCtx, stopWriters := context.WithCancel(ctx)
	writers := h.startWriters(writeCtx, writerPool, 3, 0)
	rc := &relayChaos{relayHarness: h, sc: relayScenario{longTx: true}}
	require.True(t, <-rc.holdLong(ctx, writerPool), "the long transaction never committed")
	_, err = pool.Exec(ctx, `UPDATE `+h.qualified("chaos_inject")+` SET armed = true`)
	require.NoError(t, err)
	h.faults["snapshot injections"]++
	awaitRelayEnd(t, ctx, h, r)
	stopWriters()
	writers.Wait()

	var stop *relay.StopError
	require.ErrorAs(t, r.Err(), &stop)
	require.ErrorIs(t, r.Err(), relay.ErrSnapshotBackwards)
	var injected, last, open int64
	var reason string
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT tick_id FROM `+h.qualified("chaos_inject")+`),
		last_tick, coalesce(batch_tick, 0), coalesce(stopped_reason, '')
		FROM `+h.names.Log(sqlname.SuffixCursors)+` WHERE grp = $1`, relayGroup).Scan(&injected, &last, &open, &reason))
	require.NotEmpty(t, reason, "the group's cursor row records the stop")
	require.Less(t, max(last, open), injected, "the cursor reached the injected tick")

	in := h.relayInput(ctx, relayGroup, time.Now(), time.Time{})
	rep := chaos.CheckRelay(in)
	t.Logf("relay scenario snapshot-backwards (tick %d injected, cursor at %d):\n%s", injected, last, rep)
	writeChaosFigures(t, "relay-snapshot-backwards", rep)
	requireHeldBack(t, ctx, h, in, injected, last)
	require.Len(t, rep.Cursor, 1, "the checker flags the injected tick, nothing else")
	require.Contains(t, rep.Cursor[0], fmt.Sprintf("tick %d's snapshot", injected))
	require.Empty(t, rep.Unexpected)
	require.Empty(t, rep.Order)
	require.Empty(t, rep.EarlyMoves)
	require.Empty(t, rep.Mismatches)
	require.Empty(t, rep.Ledger)
	require.Zero(t, rep.Unexplained())
	delivered := map[uuid.UUID]bool{}
	for _, d := range in.Deliveries {
		delivered[d.ID] = true
	}
	require.Len(t, rep.Lost, len(in.Ledger)-len(delivered), "lost: exactly the events held back")
}

// awaitRelayEnd waits until r ended; it fails when relayStall passed
// without a new tick and without the end.
func awaitRelayEnd(t *testing.T, ctx context.Context, h *relayHarness, r *relay.Relay) {
	t.Helper()
	seen, deadline := int64(-1), time.Now().Add(relayStall)
	for {
		select {
		case <-r.Done():
			return
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if last, err := h.lastTick(ctx); err == nil && last > seen {
			seen, deadline = last, time.Now().Add(relayStall)
		}
		require.True(t, time.Now().Before(deadline), "the relay did not stop within %v of the last tick %d", relayStall, seen)
	}
}

// requireHeldBack checks what the stop held back, against the tick
// copy's snapshots: every delivered event committed by the tick before
// the injected one, and every event committed by the cursor's tick
// delivered.
func requireHeldBack(t *testing.T, ctx context.Context, h *relayHarness, in chaos.RelayInput, injected, cursor int64) {
	t.Helper()
	ids := make([]uuid.UUID, 0, len(in.Deliveries))
	for _, d := range in.Deliveries {
		ids = append(ids, d.ID)
	}
	var past, behind []string
	err := h.pool.QueryRow(ctx, `SELECT
		coalesce(array_agg(l.event_id::text) FILTER (WHERE l.event_id = ANY($1) AND NOT pg_visible_in_snapshot(l.xid, p.snapshot::pg_snapshot)), '{}'),
		coalesce(array_agg(l.event_id::text) FILTER (WHERE NOT l.event_id = ANY($1) AND pg_visible_in_snapshot(l.xid, c.snapshot::pg_snapshot)), '{}')
		FROM `+h.qualified("relay_ledger")+` AS l, `+h.qualified("chaos_ticks")+` AS p, `+h.qualified("chaos_ticks")+` AS c
		WHERE p.tick_id = $2 AND c.tick_id = $3`, ids, injected-1, cursor).Scan(&past, &behind)
	require.NoError(t, err)
	slices.Sort(past)
	require.Empty(t, past, "published past the tick before the injected one: %s", strings.Join(past, ", "))
	require.Empty(t, behind, "committed by the cursor's tick %d, never published", cursor)
}
