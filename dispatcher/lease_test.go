package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A worker whose lease expired under a running handler loses the event to
// another replica; its late completion changes nothing, fires no outcome
// hook and is reported as ErrLockLost.
func TestStaleWorkerCompletionIsFenced(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]

	started, unblock := make(chan struct{}), make(chan struct{})
	lockLost := make(chan error, 1)
	var staleHooks atomic.Int32
	logsA, logsB := &logRecorder{}, &logRecorder{}
	cfgA := baseConfig(db)
	cfgA.Logger = slog.New(logsA)
	cfgA.LeaseDuration = 30 * time.Second   // no heartbeat within the test
	cfgA.Concurrency = 1                    // A, busy with the stale handler,
	cfgA.PollInterval = time.Hour           // claims only at start (a claim of A's
	cfgA.Wakeup = dispatcher.WakeupDisabled // would wait behind the stale handler)
	cfgA.RecoverEvery = 1000                // and leaves recovery to B
	cfgA.OnOutcome = func(context.Context, dispatcher.Outcome) { staleHooks.Add(1) }
	cfgA.OnError = func(err error) {
		if errors.Is(err, outbox.ErrLockLost) {
			lockLost <- err
		}
	}
	a, err := dispatcher.New(db.NewPool(t, 4), cfgA)
	require.NoError(t, err)
	require.NoError(t, a.Handle("x", func(ctx context.Context, e outbox.Event) error {
		close(started)
		<-unblock
		return nil
	}))
	runDispatcher(t, a)
	release := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release) // before A's stop, should the test fail
	<-started

	_, err = db.Pool.Exec(context.Background(), `UPDATE outbox_events SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)

	var bSent atomic.Int32
	cfgB := baseConfig(db)
	cfgB.Logger = slog.New(logsB)
	cfgB.RecoverEvery = 1
	cfgB.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
		if o.Status == outbox.StatusSent {
			bSent.Add(1)
		}
	}
	b, err := dispatcher.New(db.NewPool(t, 4), cfgB)
	require.NoError(t, err)
	require.NoError(t, b.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, b)
	waitFor(t, "replica B to recover and send", func() bool { return bSent.Load() == 1 })

	var xminBefore string
	require.NoError(t, db.Pool.QueryRow(context.Background(), rowVersion, id).Scan(&xminBefore))
	require.Equal(t, 1, logsB.count(slog.LevelWarn, "pending_ids", "["+id.String()+"]"),
		"B's recovery is logged at WARN with the event's id")
	release()
	require.ErrorIs(t, <-lockLost, outbox.ErrLockLost)
	require.Equal(t, 1, logsA.count(slog.LevelWarn, "event_id", id.String()), "A's lost lease is logged at WARN")

	var xminAfter string
	require.NoError(t, db.Pool.QueryRow(context.Background(), rowVersion, id).Scan(&xminAfter))
	require.Equal(t, xminBefore, xminAfter, "the stale completion must change no row")
	r := readRow(t, db, id)
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Recoveries: 1, Code: "worker_lost"}, r)
	require.Zero(t, staleHooks.Load())
	require.Equal(t, uint64(1), a.Stats().LockLost)
}

// A handler that outlives its first lease keeps it through heartbeats:
// nobody else recovers or runs the event, and it completes once. The
// handler returns once the database's clock has passed its first
// lease_until by a second, which only a renewed lease survives (a second
// dispatcher recovers expired leases at every poll). The lease is 4s, so
// a heartbeat (every 4s/3) must be delayed by well over a second to lose
// it: a 1s lease was lost once under a loaded make test.
func TestHeartbeatKeepsLongHandlerLease(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "slow", 1)[0]
	log := newCallLog()
	var cancelled atomic.Bool
	handler := func(ctx context.Context, e outbox.Event) error {
		log.enter(e.ID)
		defer log.exit(e.ID)
		first := leaseUntil(t, db, e.ID)
		for !dbClockPast(t, db, first.Add(time.Second)) {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				cancelled.Store(true)
				return ctx.Err()
			}
		}
		return nil
	}
	for range 2 {
		cfg := baseConfig(db)
		cfg.LeaseDuration = 4 * time.Second
		cfg.RecoverEvery = 1
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("slow", handler))
		runDispatcher(t, d)
	}
	waitFor(t, "the slow event SENT", func() bool {
		return readRow(t, db, id).Status == outbox.StatusSent
	})
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, id))
	require.Equal(t, 1, log.count(id))
	require.False(t, cancelled.Load(), "the handler context must not be cancelled while heartbeats succeed")
	require.Empty(t, log.overlap)
}

// leaseUntil returns the lease_until of the PROCESSING row id.
func leaseUntil(t *testing.T, db *testdb.DB, id uuid.UUID) time.Time {
	t.Helper()
	var until time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT lease_until FROM `+db.Table().String()+` WHERE id = $1 AND status = 'PROCESSING'`, id).Scan(&until))
	return until
}

// dbClockPast reports whether the database's clock is past at.
func dbClockPast(t *testing.T, db *testdb.DB, at time.Time) bool {
	t.Helper()
	var past bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp() > $1`, at).Scan(&past))
	return past
}

// startVictim runs a dispatcher on a pool that can be killed, with a
// handler that blocks until its context ends, and waits until it holds id.
func startVictim(t *testing.T, db *testdb.DB, id [16]byte, eventType string) (*dispatcher.Dispatcher, *killablePool, chan error) {
	t.Helper()
	kp := newKillablePool(t, db)
	cfg := baseConfig(db)
	cfg.LeaseDuration = time.Second
	cfg.RecoverEvery = 1
	cfg.Owner = kp.app
	d, err := dispatcher.New(kp.Pool, cfg)
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	require.NoError(t, d.Handle(eventType, func(ctx context.Context, e outbox.Event) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}))
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	waitFor(t, "the victim to hold the event", func() bool { return lockOwner(t, db, id) == kp.app })
	receive(t, "the victim's handler to start", started) // its attempt counts a recovery
	return d, kp, errc
}

// stopVictim kills the victim's database access and stops it.
func stopVictim(t *testing.T, db *testdb.DB, d *dispatcher.Dispatcher, kp *killablePool, errc chan error) {
	t.Helper()
	kp.kill(t, db)
	require.NoError(t, d.Stop(testctx.New(t)))
	require.NoError(t, <-errc)
}

// A dispatcher that dies mid-handler leaves its event PROCESSING; once the
// lease expires, another replica's recovery returns it to PENDING without
// spending an attempt and it is delivered.
func TestKilledDispatcherEventIsRecovered(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	d, kp, errc := startVictim(t, db, id, "x")
	stopVictim(t, db, d, kp, errc)
	require.Equal(t, outbox.StatusProcessing, readRow(t, db, id).Status, "a dead worker cannot complete")

	cfg := baseConfig(db)
	cfg.RecoverEvery = 10
	r, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, r.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, r)
	waitFor(t, "the event SENT by the survivor", func() bool {
		return readRow(t, db, id).Status == outbox.StatusSent
	})
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, id))
	st := r.Stats()
	require.Equal(t, uint64(1), st.Recovered)
	require.LessOrEqual(t, st.PollCycles, uint64(10)+uint64(2*time.Second/cfg.PollInterval),
		"recovered within lease expiry plus RecoverEvery cycles")
}

// An event that kills its worker every time is recovered MaxRecoveries
// times, then FAILED with worker_lost.
func TestPoisonEventFailsWithWorkerLost(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "poison", 1)[0]
	for range 4 { // one claim, then one per recovery (default MaxRecoveries 3)
		d, kp, errc := startVictim(t, db, id, "poison")
		stopVictim(t, db, d, kp, errc)
	}
	cfg := baseConfig(db)
	cfg.RecoverEvery = 1
	deadLetter := make(chan outbox.Code, 1)
	cfg.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
		if o.Event.ID == id && o.Event.Type == "poison" && o.Status == outbox.StatusFailed {
			deadLetter <- o.Code
		}
	}
	r, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	runDispatcher(t, r)
	require.Equal(t, outbox.CodeWorkerLost, <-deadLetter, "OnOutcome reports a recovery failure")
	require.Equal(t, row{Status: outbox.StatusFailed, Attempts: 0, Recoveries: 4, Code: "worker_lost"}, readRow(t, db, id))
	require.Equal(t, uint64(1), r.Stats().RecoveredFailed)
}

// When this dispatcher re-claims an event whose earlier attempt, in this
// same process, lost its lease but is still running (a handler that ignores
// its context), it does not hold the new claim behind that call: it
// releases it at once, uncharged, and its claims leave the event out (for
// another replica) until the call returned. One process never runs one
// event twice at once.
//
// The claims that leave it out are those sent once the re-claim found the
// call (held.Set.Add marks it lost; Claimer.claim reads Held.Stuck before
// its statement). A claim sent before that, in flight beside the re-claim
// (Claimers is 2), may take the row once the release has committed: it
// finds the call too and releases the event again. So at most Claimers-1
// claims beyond the re-claim may take it, and each is released.
func TestReclaimBehindLostAttemptIsReleased(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	log := newCallLog()
	started, unblock := make(chan struct{}, 2), make(chan struct{})
	lockLost := make(chan error, 1)
	cfg := baseConfig(db)
	cfg.LeaseDuration = 30 * time.Second // no heartbeat within the test
	cfg.RecoverEvery = 1
	cfg.Claimers = 2 // the default, spelled out: the bound below depends on it
	cfg.OnError = func(err error) {
		if errors.Is(err, outbox.ErrLockLost) {
			lockLost <- err
		}
	}
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		log.enter(e.ID)
		defer log.exit(e.ID)
		started <- struct{}{}
		if log.count(e.ID) == 1 {
			<-unblock // ignores its context
		}
		return nil
	}))
	runDispatcher(t, d)
	release := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release) // before the stop, should the test fail
	<-started
	_, err = db.Pool.Exec(context.Background(), `UPDATE outbox_events SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)
	waitFor(t, "recovery, a second claim and its release", func() bool {
		return d.Stats().Released >= 1
	})
	cycles := d.Stats().ClaimCycles
	waitFor(t, "five more claims", func() bool { return d.Stats().ClaimCycles >= cycles+5 })
	// Released is read first: it never passes Claimed-1 while the first
	// call runs, so equality means every later claim of it was released.
	waitFor(t, "every claim behind the first call released", func() bool {
		released := d.Stats().Released
		return released == d.Stats().Claimed-1
	})
	require.LessOrEqual(t, d.Stats().Claimed, uint64(2+cfg.Claimers-1),
		"the claims sent after the re-claim leave it out while the first call runs")
	require.Equal(t, row{Status: outbox.StatusPending, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, id),
		"released uncharged")
	require.Equal(t, 1, log.count(id), "no second call beside the first")

	release() // the first call returns
	require.ErrorIs(t, <-lockLost, outbox.ErrLockLost, "the first attempt's outcome is fenced off")
	waitFor(t, "SENT", func() bool { return readRow(t, db, id).Status == outbox.StatusSent })
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, id),
		"only the delivering call spent an attempt")
	require.Equal(t, 2, log.count(id))
	require.Empty(t, log.overlap)
}

// With the database unreachable, a stop still ends: outcomes that cannot be
// written are dropped once the local lease deadline passes, and the leases
// expire on the server for another replica to recover.
func TestStopEndsWhileDatabaseIsDown(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "x", 3)
	kp := newKillablePool(t, db)
	cfg := baseConfig(db)
	cfg.LeaseDuration = 2 * time.Second
	cfg.DrainTimeout = 100 * time.Millisecond
	cfg.Wakeup = dispatcher.WakeupDisabled
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	d, err := dispatcher.New(kp.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		started <- struct{}{}
		<-release
		return nil
	}))
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	for range 3 {
		<-started
	}
	kp.kill(t, db)
	close(release) // the outcomes now cannot be written

	stopErr := d.Stop(testctx.New(t))
	require.NotErrorIs(t, stopErr, context.DeadlineExceeded, "Stop must end while the database is down")
	require.Equal(t, stopErr, <-errc)
	require.Equal(t, uint64(3), d.Stats().LockLost)
	require.Equal(t, map[outbox.Status]int{outbox.StatusProcessing: 3}, statusCounts(t, db))
}

// A dial of a killable pool that began before the kill and ends after it
// gives the victim no connection: the kill's loop cannot terminate a
// connection that does not exist yet, however slow the dial (a victim
// that kept one renewed its leases, and its Stop waited out DrainTimeout).
func TestKillRefusesALateDial(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	kp := newKillablePool(t, db)
	dialing, dialed := make(chan struct{}), make(chan struct{})
	kp.dialing = func() {
		close(dialing)
		<-dialed
	}
	acquired := make(chan error, 1)
	go func() {
		conn, err := kp.Acquire(context.Background())
		if err == nil {
			conn.Release()
		}
		acquired <- err
	}()
	<-dialing
	kp.kill(t, db)
	close(dialed)
	require.Error(t, <-acquired, "a dial that ended after the kill gave the pool a connection")
}

// rowVersion reads the xmin of event $1, which B's success moved to the
// SENT history (or, before schema version 10, left in the outbox table):
// any write to the row changes it.
const rowVersion = `SELECT xmin::text FROM outbox_events WHERE id = $1
	UNION ALL SELECT xmin::text FROM outbox_events_sent WHERE id = $1`
