package dispatcher_test

import (
	"context"
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

// One process never runs two calls of one event at once, even after a
// re-claim behind a stuck call was let go. Under Ordering PerKey claims
// cannot leave the stuck event out: replica A re-claims it behind its stuck
// call (claim 2) and lets that claim go; its lease expires and A claims the
// event again (claim 3). Claim 3 must see that the first call still runs.
// (Before: letting claim 2 go forgot the event's running call, so claim 3
// ran the handler beside it.) Claim 4 can only come once claim 3 is let go
// too, after its own call started in the broken case, so waiting for it
// bounds the test by progress.
func TestReclaimAfterLetGoNeverRunsBesideStuckCall(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	insertKeyed(t, db, "x", []string{"k"})
	cfg := baseConfig(db)
	cfg.Owner, cfg.LeaseDuration, cfg.HandlerTimeout, cfg.RecoverEvery = "a", time.Second, 100*time.Millisecond, 1
	cfg.Ordering = dispatcher.PerKey
	a, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	var calls atomic.Int32
	unblock := make(chan struct{})
	require.NoError(t, a.Handle("x", func(context.Context, outbox.Event) error {
		calls.Add(1)
		<-unblock // ignores its context
		return nil
	}))
	runDispatcher(t, a)
	t.Cleanup(func() { close(unblock) })

	testctx.Await(t, "A claims the event a fourth time", func() bool {
		return a.Stats().Claimed >= 4 || calls.Load() > 1
	})
	require.Equal(t, int32(1), calls.Load(), "the handler ran beside its own stuck call in one process")
}

// Under Ordering PerKey a re-claim behind a stuck publish is let go with
// its lease left to expire; it must not carry a start mark, or each such
// re-claim costs the event a recovery (and past MaxRecoveries a FAILED
// worker_lost) although nothing ran. (Before: the wave marked the re-claim
// started before it was let go, so recoveries grew by one per re-claim.)
// Claim 3 comes only after claim 2's lease was recovered, so the count is
// read once it has.
func TestReclaimBehindStuckPublishIsNotCharged(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	id := insertKeyed(t, db, "x", []string{"k"})[0]
	pub := deafPublisher{unblock: make(chan struct{})}
	cfg := baseConfig(db)
	cfg.Publisher, cfg.Ordering, cfg.MaxRecoveries = pub, dispatcher.PerKey, 10
	cfg.LeaseDuration, cfg.PublishTimeout, cfg.RecoverEvery = time.Second, 50*time.Millisecond, 1
	a, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	runDispatcher(t, a)
	t.Cleanup(func() { close(pub.unblock) })

	testctx.Await(t, "A claims the event a third time", func() bool { return a.Stats().Claimed >= 3 })
	require.Equal(t, 1, readRow(t, db, id).Recoveries, "only the stuck publish's lease cost a recovery")
}

// An event whose handler succeeded and that waits for its batch's publish
// is not held for ever behind a batch-mate's handler that ignores its
// context: the batch's publish waits for every handler of the batch, so
// once a batch-mate's call overruns, the waiting event's lease is no
// longer renewed either, and it goes back for another replica. (Before:
// its lease was renewed for as long as the stuck call ran, so the event
// stayed PROCESSING under this dispatcher for ever.) Any renewal after
// the overrun was seen shows as a lease_until past that time plus the
// lease, so the test waits for that or for the row to leave PROCESSING.
func TestBatchMateOfStuckHandlerIsNotHeldForEver(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "x", 2)
	stuck, waiting := ids[0], ids[1]
	cfg := baseConfig(db)
	cfg.Publisher, cfg.RouteFunc = &recordingPublisher{}, func(outbox.Event) string { return "dest" }
	cfg.Concurrency, cfg.LeaseDuration, cfg.HandlerTimeout, cfg.RecoverEvery = 2, time.Second, 100*time.Millisecond, 1
	token, t0 := runWithStuckCall(t, db, cfg, stuck)
	require.False(t, renewedSince(t, db, waiting, token, t0, cfg.LeaseDuration),
		"the waiting event's lease was renewed behind its batch-mate's stuck call")
}

// runWithStuckCall runs a dispatcher of cfg whose handler of type "x"
// succeeds but on the event stuck, where it blocks until the test ends,
// ignoring its context. Once the heartbeat has seen that call overrun, it
// returns the token of the claim that took stuck (its whole batch) and
// the database's time then, t0.
func runWithStuckCall(t *testing.T, db *testdb.DB, cfg dispatcher.Config, stuck uuid.UUID) (token uuid.UUID, t0 time.Time) {
	t.Helper()
	a, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	started, unblock := make(chan struct{}), make(chan struct{})
	require.NoError(t, a.Handle("x", func(_ context.Context, e outbox.Event) error {
		if e.ID == stuck {
			close(started)
			<-unblock // ignores its context
		}
		return nil
	}))
	runDispatcher(t, a)
	t.Cleanup(func() { close(unblock) })
	<-started
	token = claimToken(t, db, stuck) // the claim of the whole batch

	// Overruns counts at the start of the first beat that sees the overrun,
	// once the beat before has ended: every renewal sent from then on leaves
	// the event out, and none sent before ends its lease past t0 + lease.
	testctx.Await(t, "the heartbeat seeing the stuck call overrun", func() bool { return a.Stats().Overruns == 1 })
	return token, dbNow(t, db)
}

// claimToken is the lock token the row of id is held under now.
func claimToken(t *testing.T, db *testdb.DB, id uuid.UUID) uuid.UUID {
	t.Helper()
	var token uuid.UUID
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT lock_token FROM outbox_events WHERE id = $1 AND status = 'PROCESSING'`, id).Scan(&token))
	return token
}

// renewedSince waits until the row of id either shows the claim held
// renewed after t0 (a lease_until past t0 + lease under that token: true)
// or no longer shows that claim (given back, recovered, completed or
// claimed again: false).
func renewedSince(t *testing.T, db *testdb.DB, id, held uuid.UUID, t0 time.Time, lease time.Duration) bool {
	t.Helper()
	var status string
	var token *uuid.UUID
	var leaseUntil *time.Time
	read := func() {
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT status, lock_token, lease_until FROM `+testdb.AllRows(db.Table())+` AS e
			WHERE id = $1 ORDER BY place = 'T' DESC LIMIT 1`, id).Scan(&status, &token, &leaseUntil))
	}
	renewed := false
	testctx.Await(t, "the lease renewed after t0, or the claim gone", func() bool {
		read()
		if status != string(outbox.StatusProcessing) || token == nil || *token != held {
			return true
		}
		renewed = leaseUntil != nil && leaseUntil.After(t0.Add(lease))
		return renewed
	})
	return renewed
}

// Under Ordering PerKey a batch runs in waves, each waiting for the one
// before: the later events of the other keys of a batch whose wave holds
// a handler that ignores its context are not held for ever behind it. Once
// the call overruns, they are no longer renewed, so they go back to
// PENDING unstarted and run in another claim. (Before: k2's second event
// waited for the stuck wave under a lease renewed for ever.)
func TestLaterWavesOfStuckBatchAreNotHeldForEver(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "x", []string{"k1", "k2", "k2"})
	stuck, later := ids[0], ids[2]
	cfg := baseConfig(db)
	cfg.Ordering, cfg.Concurrency = dispatcher.PerKey, 2
	cfg.LeaseDuration, cfg.HandlerTimeout, cfg.RecoverEvery = time.Second, 100*time.Millisecond, 1
	token, t0 := runWithStuckCall(t, db, cfg, stuck)
	require.False(t, renewedSince(t, db, later, token, t0, cfg.LeaseDuration),
		"a later wave's event was renewed behind the stuck wave")
	testctx.Await(t, "k2's later event SENT", func() bool { return readRow(t, db, later).Status == outbox.StatusSent })
}

// A suspect whose handler ignores its context holds the suspect turn only
// while its row shows its attempt: once recovery has returned that row
// (the call overran, its lease expired), no two suspects can show a
// started attempt at once through it any more, and the suspects waiting
// for the turn run. (Before: the turn stayed taken for as long as the
// call ran, so in a single replica every other suspect was claimed,
// released after LeaseDuration and claimed again, for ever.) Each release
// of the waiting suspect after the stuck row's recovery is progress: two
// of them mean it was not given the turn.
func TestStuckSuspectGivesBackTheTurnOnceRecovered(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	stuck := insertSuspects(t, db, "stuck", 1)[0]
	cfg := baseConfig(db)
	cfg.LeaseDuration, cfg.HandlerTimeout, cfg.RecoverEvery, cfg.MaxRecoveries = time.Second, 100*time.Millisecond, 1, 10
	// The waiting suspect waits for the turn longer than a loaded machine
	// may take to see the stuck row recovered (a heartbeat finds it gone),
	// so that a release counts only when the turn was not given back.
	dispatcher.SetSuspectWait(&cfg, 10*time.Second)
	a, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	started, unblock := make(chan struct{}), make(chan struct{})
	require.NoError(t, a.Handle("stuck", func(context.Context, outbox.Event) error {
		close(started)
		<-unblock // ignores its context
		return nil
	}))
	require.NoError(t, a.Handle("t", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, a)
	t.Cleanup(func() { close(unblock) })
	<-started
	waiting := insertSuspects(t, db, "t", 1)[0]

	testctx.Await(t, "the stuck suspect's row recovered", func() bool { return readRow(t, db, stuck).Recoveries == 2 })
	released := a.Stats().Released
	testctx.Await(t, "the waiting suspect SENT, or released twice more", func() bool {
		return readRow(t, db, waiting).Status == outbox.StatusSent || a.Stats().Released >= released+2
	})
	require.Equal(t, outbox.StatusSent, readRow(t, db, waiting).Status, "the waiting suspect never had the turn")
}
