package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// refuseOutcomeOf installs triggers that raise whenever an outcome of id
// is written (SENT, a retry or FAILED; testdb.OnOutcomes). Claims,
// renewals, releases, recovery and the refused outcome's own record pass.
func refuseOutcomeOf(t *testing.T, db *testdb.DB, id uuid.UUID) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), fmt.Sprintf(`
CREATE FUNCTION refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.id = '%s' THEN
		RAISE EXCEPTION 'the test trigger refuses the outcome of %%', NEW.id;
	END IF;
	RETURN NEW;
END $$`, id))
	require.NoError(t, err)
	db.OnOutcomes(t, "refuse_outcome")
}

// One outcome the database refuses (a trigger raises for one event) does
// not hold up the others written in the same statement: the write is split
// until the refusal is narrowed down to that event, the others end SENT,
// and the refused one is retried with backoff, then recorded FAILED with
// code outcome_refused (an ERROR log and outbox.ErrOutcomeRefused).
// Stop, called while it is still retried, returns once it is let go.
func TestRefusedOutcomeIsIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	gate := insertEvents(t, db, "gate", 1)[0]
	ids := insertEvents(t, db, "x", 4)
	poison := ids[2]
	refuseOutcomeOf(t, db, poison)

	errs, logs := &errorLog{}, &logRecorder{}
	cfg := baseConfig(db)
	cfg.DrainTimeout = 20 * time.Second // longer than the refused outcome's tries: Stop waits for them, no longer
	cfg.OnError = errs.add
	cfg.Logger = slog.New(logs)
	gateGo, xGo := make(chan struct{}), make(chan struct{})
	xDone := make(chan struct{}, len(ids))
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("gate", func(context.Context, outbox.Event) error {
		<-gateGo
		return nil
	}))
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		<-xGo
		xDone <- struct{}{}
		return nil
	}))
	runDispatcher(t, d)
	releaseGate, releaseX := sync.OnceFunc(func() { close(gateGo) }), sync.OnceFunc(func() { close(xGo) })
	t.Cleanup(releaseGate) // before the stop, should the test fail
	t.Cleanup(releaseX)
	waitFor(t, "all five events claimed", func() bool { return d.Stats().Claimed == 5 })

	// The completer writes the gate's outcome first and waits on a row lock
	// the test holds, so that the four other outcomes gather behind it and
	// are written in one statement. (Should one reach the completer only
	// after the lock is gone, it is written on its own and the rest of the
	// test holds the same.)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var pid int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM outbox_events WHERE id = $1 FOR UPDATE`, gate).Scan(&pid))
	releaseGate()
	waitFor(t, "the gate's completion to wait on the test's lock", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`, pid).Scan(&n))
		return n > 0
	})
	releaseX()
	for range ids {
		<-xDone
	}
	time.Sleep(100 * time.Millisecond) // each outcome reaches the completer as its handler returns
	require.NoError(t, tx.Rollback(ctx))

	waitFor(t, "the gate and the three other events SENT", func() bool {
		return statusCounts(t, db)[outbox.StatusSent] == 4
	})
	require.NoError(t, d.Stop(testctx.New(t)), "Stop returns once the refused outcome is recorded")

	for _, id := range append([]uuid.UUID{gate}, ids...) {
		if id != poison {
			require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, id))
		}
	}
	require.Equal(t, row{Status: outbox.StatusFailed, Code: string(outbox.CodeOutcomeRefused)}, readRow(t, db, poison),
		"recorded FAILED outcome_refused, spending no attempt, rather than left for its lease to expire")
	refused := errs.matching(outbox.ErrOutcomeRefused)
	require.Len(t, refused, 1)
	require.ErrorContains(t, refused[0], poison.String())
	require.Equal(t, 1, logs.count(slog.LevelError, "event_id", poison.String()), "an ERROR log names the event")
	st := d.Stats()
	require.Equal(t, uint64(4), st.Sent)
	require.Zero(t, st.LockLost)
}

// An outcome the database keeps refusing (a trigger refuses the success
// of one event) never turns into a re-run: the event is recorded FAILED
// with code outcome_refused, and recovery passes well after its lease
// would have expired find nothing to take back. Before, the refused
// outcome was let go, the lease expired, and the event ran again (up to
// three times in 12s), ending FAILED with a misleading worker_lost.
func TestRefusedOutcomeIsNotRunAgain(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	refuseOutcomeOf(t, db, id)

	var mu sync.Mutex
	var passesAfter []time.Time // when recovery passes ran
	outcomes, calls := &outcomeLog{}, newCallLog()
	cfg := baseConfig(db)
	cfg.LeaseDuration = time.Second
	cfg.RecoverEvery = 1
	cfg.OnOutcome = outcomes.add
	dispatcher.SetRecoverHook(&cfg, func(uint64, int, int) {
		mu.Lock()
		defer mu.Unlock()
		passesAfter = append(passesAfter, time.Now())
	})
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		calls.enter(e.ID)
		calls.exit(e.ID)
		return nil
	}))
	runDispatcher(t, d)

	waitFor(t, "the refused outcome given up", func() bool {
		return len(outcomes.of(id)) > 0 || calls.count(id) > 1
	})
	givenUp := time.Now()
	// A re-run needs the lease to expire and a recovery pass after that:
	// wait for two passes that began a lease duration and more later.
	waitFor(t, "two recovery passes after the lease would have expired", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range passesAfter {
			if at.After(givenUp.Add(2 * cfg.LeaseDuration)) {
				n++
			}
		}
		return n >= 2
	})
	require.Equal(t, 1, calls.count(id), "the handler ran once")
	got := outcomes.of(id)
	require.Len(t, got, 1)
	require.Equal(t, outbox.StatusFailed, got[0].Status)
	require.Equal(t, outbox.CodeOutcomeRefused, got[0].Code)
	require.ErrorIs(t, got[0].Err, outbox.ErrOutcomeRefused)
	require.Equal(t, row{Status: outbox.StatusFailed, Code: string(outbox.CodeOutcomeRefused)}, readRow(t, db, id))
	var lastError string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT last_error FROM `+testdb.AllRows(db.Table())+` AS e WHERE id = $1`, id).Scan(&lastError))
	require.Contains(t, lastError, "refused to record SENT")
	require.Contains(t, lastError, "the test trigger refuses")
}
