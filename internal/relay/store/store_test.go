package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

func TestTickNeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()

	id, made, err := e.store.Tick(ctx, e.ticker, time.Hour)
	require.NoError(t, err)
	require.False(t, made, "no events, not idle: no tick")
	require.Equal(t, int64(1), id)

	emit(t, e.db.Pool, "k", 2)
	id, made, err = e.store.Tick(ctx, e.ticker, time.Hour)
	require.NoError(t, err)
	require.True(t, made, "new events: a tick")
	require.Equal(t, int64(2), id)

	_, made, err = e.store.Tick(ctx, e.ticker, time.Hour)
	require.NoError(t, err)
	require.False(t, made)

	_, made, err = e.store.Tick(ctx, e.ticker, 0)
	require.NoError(t, err)
	require.True(t, made, "idle passed: a tick")
}

func TestTickAfterLongTransactionCommitsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := begin(t, e.db.Pool)
	emit(t, long, "k", 1)
	e.tick(t) // the long transaction is in this tick's xip
	require.NoError(t, long.Commit(t.Context()))
	_, made, err := e.store.Tick(t.Context(), e.ticker, time.Hour)
	require.NoError(t, err)
	require.True(t, made, "the long transaction finished with events: a tick")
}

func TestTickLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	other := uuid.New()
	held, err := e.store.TakeTicker(ctx, "other", other, time.Hour)
	require.NoError(t, err)
	require.False(t, held, "held elsewhere")
	_, _, err = e.store.Tick(ctx, other, 0)
	require.ErrorIs(t, err, store.ErrLeaseLost)

	_, err = e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticker SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)
	_, _, err = e.store.Tick(ctx, e.ticker, 0)
	require.ErrorIs(t, err, store.ErrLeaseLost, "an expired lease does not tick")
	held, err = e.store.TakeTicker(ctx, "other", other, time.Hour)
	require.NoError(t, err)
	require.True(t, held, "an expired lease is taken")
	_, _, err = e.store.Tick(ctx, other, 0)
	require.NoError(t, err)

	require.NoError(t, e.store.ReleaseTicker(ctx, other))
	held, err = e.store.TakeTicker(ctx, "test", e.ticker, time.Hour)
	require.NoError(t, err)
	require.True(t, held, "a released lease is taken")
}

func TestTickRefusesBackwards(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.tick(t)
	_, err := e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET snapshot = '9000000000:9000000000:'::pg_snapshot WHERE tick_id = $1`, id)
	require.NoError(t, err)
	_, _, err = e.store.Tick(ctx, e.ticker, 0)
	require.ErrorIs(t, err, store.ErrSnapshotBackwards)

	_, err = e.db.Pool.Exec(ctx, `UPDATE `+logName+`_ticks SET snapshot = '1:1:'::pg_snapshot, sysid = sysid + 1 WHERE tick_id = $1`, id)
	require.NoError(t, err)
	_, _, err = e.store.Tick(ctx, e.ticker, 0)
	require.NoError(t, err, "a new system identifier alone (pg_upgrade) is no reason to refuse")
}

func TestAddParts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	added, headroom, err := e.store.AddParts(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, added, 1, "Migrate created the parts ahead")
	require.Greater(t, headroom, uint64((store.MinParts-1)*sqlname.LogPartXids))

	var xmax uint64
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax))
	lo := (xmax/sqlname.LogPartXids + 5) * sqlname.LogPartXids
	_, err = e.db.Pool.Exec(ctx, `DROP TABLE `+e.store.Names().LogPart(lo))
	require.NoError(t, err)
	added, _, err = e.store.AddParts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, added, "the missing part is added")
}

// TestTickSnapshotsNeverGoBack ticks from several connections at once
// while writers commit: each tick's snapshot sees everything the tick
// before it saw (xmin and xmax not lower, and no xid visible before is
// running again).
func TestTickSnapshotsNeverGoBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	pool := e.db.NewPool(t, 8)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				if w%2 == 0 {
					emit(t, pool, "k", 1)
					continue
				}
				if _, _, err := e.store.Tick(ctx, e.ticker, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var ticks, bad int
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE
			pg_snapshot_xmax(b.snapshot) < pg_snapshot_xmax(a.snapshot)
			OR pg_snapshot_xmin(b.snapshot) < pg_snapshot_xmin(a.snapshot)
			OR EXISTS (SELECT 1 FROM pg_snapshot_xip(b.snapshot) AS x
				WHERE x < pg_snapshot_xmax(a.snapshot) AND pg_visible_in_snapshot(x, a.snapshot)))
		FROM `+logName+`_ticks AS a JOIN `+logName+`_ticks AS b ON b.tick_id = a.tick_id + 1`).Scan(&ticks, &bad))
	require.Equal(t, 3*30, ticks, "every tick made, ids without gaps")
	require.Zero(t, bad)
}

func TestLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	_, err := e.store.Lag(ctx, "g")
	require.ErrorIs(t, err, store.ErrNoGroup)
	cur, token := e.group(t, "g")
	emit(t, e.db.Pool, "k", 3)
	e.tick(t)
	lag, err := e.store.Lag(ctx, "g")
	require.NoError(t, err)
	require.Equal(t, int64(3), lag.Events)
	require.Greater(t, lag.Seconds, 0.0)
	require.GreaterOrEqual(t, lag.TickAge, time.Duration(0))

	e.drainAll(t, token, cur)
	lag, err = e.store.Lag(ctx, "g")
	require.NoError(t, err)
	require.Zero(t, lag.Events)
	require.Zero(t, lag.Seconds)
}

func TestPartsFor(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.MinParts, store.PartsFor(0))
	require.Equal(t, store.MinParts, store.PartsFor(100))
	perPart := float64(sqlname.LogPartXids) / store.HeadroomTime.Seconds()
	require.Equal(t, 40, store.PartsFor(39.5*perPart), "two days, rounded up")
	require.Equal(t, store.MaxParts, store.PartsFor(1e9))
}

// TestCheckPartsAndKeepParts: with only the current xid's part left the
// start check refuses, naming part_add; KeepParts puts parts back.
func TestCheckPartsAndKeepParts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	headroom, err := e.store.CheckParts(ctx)
	require.NoError(t, err)
	require.Greater(t, headroom, uint64((store.MinParts-1)*sqlname.LogPartXids))

	var xmax uint64
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax))
	cur := xmax / sqlname.LogPartXids * sqlname.LogPartXids
	for i := uint64(1); i < store.MinParts+1; i++ {
		_, err = e.db.Pool.Exec(ctx, `DROP TABLE IF EXISTS `+e.store.Names().LogPart(cur+i*sqlname.LogPartXids))
		require.NoError(t, err)
	}
	_, err = e.store.CheckParts(ctx)
	require.ErrorIs(t, err, store.ErrNoHeadroom)
	var perr *store.PartsError
	require.ErrorAs(t, err, &perr)
	require.Less(t, perr.HeadroomXids, uint64(sqlname.LogPartXids))
	require.Contains(t, err.Error(), e.store.Names().Function(sqlname.SuffixPartAdd))
	require.Contains(t, err.Error(), "outboxctl relay maintain")

	p, err := e.store.KeepParts(ctx, 20)
	require.NoError(t, err)
	require.Equal(t, 19, p.Added)
	require.GreaterOrEqual(t, p.Xmax, xmax)
	require.Greater(t, p.HeadroomXids, uint64(19*sqlname.LogPartXids))
	_, err = e.store.CheckParts(ctx)
	require.NoError(t, err)
}
