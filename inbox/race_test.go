package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestProcessRace has 20 goroutines process the same 50 events, each event
// in a transaction of its own, in the same order from one start signal so
// that they collide. Some goroutines roll back after the work for some
// events. Every event's work must be committed exactly once.
func TestProcessRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := b.db.NewPool(t, 20)
	const goroutines, ids = 20, 50
	events := make([]outbox.Event, ids)
	for i := range events {
		events[i] = newEvent(`{"n":1}`)
	}

	var committedNew atomic.Int64
	errs := concurrently(goroutines, func(g int) error {
		for i, e := range events {
			// 4 of the 20 goroutines roll back each event: never all.
			rollback := (g+i)%5 == 0
			isNew, err := processOnce(ctx, pool, b.ib, e, rollback)
			if err != nil {
				return err
			}
			if isNew && !rollback {
				committedNew.Add(1)
			}
		}
		return nil
	})

	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(ids), committedNew.Load())
	require.Equal(t, ids, b.records(t))
	require.Equal(t, ids, b.count(t, "SELECT count(*) FROM effects"))
	require.Equal(t, ids, b.count(t, "SELECT count(DISTINCT event_id) FROM effects"))
}

// processOnce processes e for consumer "billing" in a transaction of its
// own and commits it, or rolls it back when rollback is set. It reports
// whether the work ran.
func processOnce(ctx context.Context, pool *pgxpool.Pool, ib *inbox.Inbox, e outbox.Event, rollback bool) (bool, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var calls atomic.Int64
	res, err := ib.Process(ctx, tx, "billing", e, effect("billing", e.ID, &calls))
	if err != nil {
		return false, err
	}
	if res.Duplicate != (calls.Load() == 0) {
		return false, errDuplicateMismatch
	}
	if rollback {
		return !res.Duplicate, tx.Rollback(ctx)
	}
	return !res.Duplicate, tx.Commit(ctx)
}

var errDuplicateMismatch = errors.New("Result.Duplicate disagrees with whether work ran")

// TestProcessWaitsForCompetitor has transaction A record an event and hold
// it uncommitted while B processes the same event: B must wait on A's row,
// then act on A's outcome.
func TestProcessWaitsForCompetitor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// otherPayload makes B's content differ from A's.
		otherPayload  bool
		commitA       bool
		wantDuplicate bool
		wantConflict  bool
		wantBWork     int64
	}{
		{name: "CompetitorCommits", commitA: true, wantDuplicate: true},
		{name: "CompetitorCommitsOtherContent", commitA: true, otherPayload: true, wantConflict: true},
		{name: "CompetitorRollsBack", wantBWork: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			e := newEvent(`{"n":1}`)
			var callsA, callsB atomic.Int64
			txA, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = b.ib.Process(ctx, txA, "billing", e, effect("billing", e.ID, &callsA))
			require.NoError(t, err)

			eB := e
			if tt.otherPayload {
				eB.Payload = []byte(`{"n":2}`)
			}
			txB, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			pidB := txB.Conn().PgConn().PID()
			type outcome struct {
				res inbox.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := b.ib.Process(ctx, txB, "billing", eB, effect("billing", e.ID, &callsB))
				done <- outcome{res, err}
			}()
			waitForLock(t, b, pidB)
			if tt.commitA {
				require.NoError(t, txA.Commit(ctx))
			} else {
				require.NoError(t, txA.Rollback(ctx))
			}
			got := <-done
			if got.err != nil {
				require.NoError(t, txB.Rollback(ctx))
			} else {
				require.NoError(t, txB.Commit(ctx))
			}

			require.Equal(t, tt.wantConflict, got.err != nil, "error: %v", got.err)
			if tt.wantConflict {
				require.ErrorIs(t, got.err, inbox.ErrContentMismatch)
			}
			require.Equal(t, tt.wantDuplicate, got.res.Duplicate)
			require.Equal(t, tt.wantBWork, callsB.Load())
			require.Equal(t, 1, b.effects(t, "billing", e.ID))
			require.Equal(t, 1, b.records(t))
		})
	}
}

// waitForLock waits until the backend pid is blocked on a lock.
func waitForLock(t *testing.T, b *testBundle, pid uint32) {
	t.Helper()
	testctx.Await(t, fmt.Sprintf("backend %d to wait on a lock", pid), func() bool {
		var waiting bool
		err := b.db.Pool.QueryRow(context.Background(),
			"SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return err == nil && waiting
	})
}
