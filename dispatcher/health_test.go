package dispatcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Health is unhealthy before the start and after the stop; while running
// it records the last claim and outcome write, and turns unhealthy once
// claims have failed for longer than maxAge (here the database is cut
// off), without a timed assertion: a maxAge of an hour still passes, one
// shorter than the time since the first failure does not.
func TestHealth(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	kp := newKillablePool(t, db)
	cfg := baseConfig(db)
	cfg.Wakeup = dispatcher.WakeupDisabled
	d, err := dispatcher.New(kp.Pool, cfg)
	require.NoError(t, err)
	sent := make(chan struct{}, 1)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		sent <- struct{}{}
		return nil
	}))
	require.ErrorIs(t, d.Health().Healthy(time.Hour), dispatcher.ErrUnhealthy, "not started")
	require.ErrorContains(t, d.Health().Healthy(time.Hour), "new")

	before := time.Now()
	require.NoError(t, d.Start(context.Background()))
	insertEvents(t, db, "x", 1)
	<-sent
	waitFor(t, "the outcome written", func() bool { return !d.Health().LastCompletion.IsZero() })
	h := d.Health()
	require.Equal(t, dispatcher.StateRunning, h.State)
	require.Equal(t, dispatcher.ListenerOff, h.Listener)
	require.False(t, h.Started.Before(before))
	require.False(t, h.LastClaim.Before(h.Started))
	require.Zero(t, h.ClaimErrors)
	require.True(t, h.FailingSince.IsZero())
	require.NoError(t, h.Healthy(time.Minute), "nothing is failing")

	kp.kill(t, db)
	waitFor(t, "failed claims", func() bool { return d.Health().ClaimErrors >= 2 })
	h = d.Health()
	require.False(t, h.FailingSince.IsZero())
	require.False(t, h.LastClaim.After(h.FailingSince))
	require.NoError(t, h.Healthy(time.Hour), "failing for less than maxAge")
	waitFor(t, "time to pass the first failure", func() bool { return time.Since(h.FailingSince) > time.Millisecond })
	err = h.Healthy(time.Millisecond)
	require.ErrorIs(t, err, dispatcher.ErrUnhealthy)
	require.ErrorContains(t, err, "failing since")

	require.NoError(t, d.Stop(context.Background()))
	require.ErrorContains(t, d.Health().Healthy(time.Hour), "stopped")
}

// One outcome the database refuses on an idle table is retried, given up,
// and leaves the dispatcher healthy: a refusal of one event's write says
// nothing about the dispatcher, and no outcome is left failing.
func TestHealthRecoversAfterOneRefusedOutcome(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	refuseOutcomeOf(t, db, id)
	errs := &errorLog{}
	cfg := baseConfig(db)
	cfg.Wakeup = dispatcher.WakeupDisabled
	cfg.OnError = errs.add
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
	waitFor(t, "the refused outcome let go", func() bool {
		return len(errs.matching(outbox.ErrOutcomeRefused)) == 1
	})
	before := d.Health().LastClaim
	// Claims going on for a second past the refusal: long past maxAge
	// below, so that a write or claim still failing would show.
	waitFor(t, "claims to go on succeeding for a second", func() bool {
		return d.Health().LastClaim.After(before.Add(time.Second))
	})
	h := d.Health()
	require.Zero(t, h.ClaimErrors)
	require.NoError(t, h.Healthy(500*time.Millisecond), "claims succeed and nothing is failing any more")
}

// A coordinator wedged in a poll cycle (here a recovery waits on a lock
// held on the table, with no failure to record for 30s) makes the
// dispatcher unhealthy once it has begun no poll cycle for longer than
// maxAge plus the poll interval, and healthy again once it goes on.
func TestHealthNoticesStalledCoordinator(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.Wakeup = dispatcher.WakeupDisabled
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RecoverEvery = 1
	cfg.LeaseDuration = 2 * time.Minute // statements time out after 30s
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "a poll", func() bool { return !d.Health().LastPoll.IsZero() })
	require.NoError(t, d.Health().Healthy(time.Minute))

	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	waitFor(t, "the stall noticed", func() bool {
		return errors.Is(d.Health().Healthy(500*time.Millisecond), dispatcher.ErrUnhealthy)
	})
	h := d.Health()
	require.ErrorContains(t, h.Healthy(500*time.Millisecond), "stalled")
	require.Zero(t, h.ClaimErrors, "nothing failed: the coordinator waits")
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, "polls again", func() bool { return d.Health().Healthy(time.Minute) == nil && d.Health().LastPoll.After(h.LastPoll) })
}
