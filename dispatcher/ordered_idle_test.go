package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A key held by its FAILED head (BlockKey), with a due event behind it,
// gives an ordered dispatcher nothing to claim: it must not claim again
// and again. The due event behind the head is not due work; before, the
// next-due probe found it due and woke a claim at every cooldown, forever.
// Polls are an hour apart, so any claim after the first is a wake-up.
func TestOrderedBlockedKeyDoesNotWakeClaims(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "ev", []string{"k", "k"})
	db.MoveToDead(t, ids[0], "")
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.PollInterval, cfg.Wakeup = time.Hour, dispatcher.WakeupRequired
	follow := watchFollowUps(&cfg)
	probes := watchDueProbes(&cfg)
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("ev", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
	waitFor(t, "the first claim and the listener", func() bool {
		s := d.Stats()
		return s.ClaimCycles >= 1 && s.ListenerConnects >= 1
	})
	first := d.Stats().ClaimCycles
	// The listener's connection triggers a claim and its follow-ups;
	// once they are over, only the due timer armed when the claims
	// settle could claim again (before, at every cooldown, forever).
	follow.waitOver(t, d, 1)
	probes.untilIdle(t, d, follow.last(), func() {
		require.LessOrEqual(t, d.Stats().ClaimCycles, first+5, "claims woken for a key that cannot move")
	})
	require.Equal(t, outbox.StatusPending, readRow(t, db, ids[1]).Status)
}

// heldHead runs an ordered dispatcher with cfg whose handler holds key
// k's first event (emitted here) until finish is closed; it returns once
// that handler has started.
func heldHead(t *testing.T, db *testdb.DB, cfg dispatcher.Config) (d *dispatcher.Dispatcher, finish chan struct{}) {
	t.Helper()
	first := insertKeyed(t, db, "ev", []string{"k"})
	started, finish := make(chan struct{}), make(chan struct{})
	d, err := dispatcher.New(db.NewPool(t, 6), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("ev", func(_ context.Context, e outbox.Event) error {
		if e.ID == first[0] {
			close(started)
			<-finish
		}
		return nil
	}))
	runDispatcher(t, d)
	<-started
	return d, finish
}

// An event emitted for a key while the key's head runs is claimed once
// the head is sent, without waiting for a poll (an hour here): the
// claim woken by the emit found the key blocked, and the head's outcome
// wakes the next one.
func TestOrderedNextEventAfterHeadWithoutPoll(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.PollInterval, cfg.Wakeup = time.Hour, dispatcher.WakeupRequired
	cfg.NoWakeupCooldown = true // one claim per wake-up, none at the end of a cooldown
	d, finish := heldHead(t, db, cfg)
	second := insertKeyed(t, db, "ev", []string{"k"})
	before := d.Health().LastClaim
	d.Trigger() // as the emit's notification would
	waitFor(t, "a claim that finds k blocked", func() bool { return d.Health().LastClaim.After(before) })
	close(finish)
	waitFor(t, "k's second event SENT", func() bool {
		return readRow(t, db, second[0]).Status == outbox.StatusSent
	})
}

// Without wake-ups (WakeupDisabled, as behind a pooler) a key's next
// event is still claimed as soon as its head's outcome is written, not at
// the next poll: a hot key moves one run per completion, not one per
// PollInterval.
func TestOrderedNextRunWithoutWakeups(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	cfg := orderedConfig(db, dispatcher.BlockKey)
	cfg.PollInterval, cfg.Wakeup = time.Hour, dispatcher.WakeupDisabled
	_, finish := heldHead(t, db, cfg)
	second := insertKeyed(t, db, "ev", []string{"k"}) // no poll for an hour, no wake-up
	close(finish)
	waitFor(t, "k's second event SENT", func() bool {
		return readRow(t, db, second[0]).Status == outbox.StatusSent
	})
}
