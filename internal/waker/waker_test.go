package waker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wakerBundle drives a waker on a clock of its own: now is the time of the
// next call, and timer when its timer fires (zero: not armed).
type wakerBundle struct {
	w     *Waker
	start time.Time
	timer time.Time
	now   time.Time
}

// newWakerBundle gives a waker with the default WakeupCooldown (20ms) and
// BatchSize (100: busy from 50 events within a cooldown).
func newWakerBundle(t *testing.T) *wakerBundle {
	t.Helper()
	b := &wakerBundle{start: time.Unix(1_000, 0)}
	b.now = b.start
	b.w = New(Config{Cooldown: 20 * time.Millisecond, BatchSize: 100, ArmFunc: func(d time.Duration) { b.timer = b.now.Add(d) }})
	return b
}

// at moves the clock to ms milliseconds after the start.
func (b *wakerBundle) at(ms float64) time.Time {
	b.now = b.start.Add(time.Duration(ms * float64(time.Millisecond)))
	return b.now
}

// timerAt is when the timer fires, in milliseconds after the start (-1:
// not armed).
func (b *wakerBundle) timerAt() float64 {
	if b.timer.IsZero() {
		return -1
	}
	return float64(b.timer.Sub(b.start)) / float64(time.Millisecond)
}

// fire moves the clock to the timer and fires it.
func (b *wakerBundle) fire(t *testing.T, inflight bool) bool {
	t.Helper()
	require.False(t, b.timer.IsZero(), "the timer is not armed")
	b.now, b.timer = b.timer, time.Time{}
	return b.w.Fired(b.now, inflight)
}

// wakeAndFind sends a wake-up at ms that must claim at once, and ends its
// claim 1ms later with got events found.
func (b *wakerBundle) wakeAndFind(t *testing.T, ms float64, got int) {
	t.Helper()
	require.True(t, b.w.Wakeup(b.at(ms), false), "the wake-up at %vms claims at once", ms)
	require.False(t, b.w.Finished(b.at(ms+1), got, false))
}

func TestWaker(t *testing.T) {
	t.Parallel()

	t.Run("BusyCoalescesWakeupsIntoOneClaimPerCooldown", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		b.wakeAndFind(t, 0, 60) // 60 events in a cooldown: busy
		for _, ms := range []float64{2, 5, 9, 14} {
			require.False(t, b.w.Wakeup(b.at(ms), false), "a wake-up at %vms waits out the cooldown", ms)
		}
		require.Equal(t, 20.0, b.timerAt(), "one claim at the end of the cooldown")
		require.True(t, b.fire(t, false))
		require.Equal(t, 40.0, b.timerAt(), "the wake-up at 14ms gets a trailing claim a cooldown after its claim")
		require.False(t, b.w.Finished(b.at(21), 60, false))
		require.True(t, b.fire(t, false))
		require.Equal(t, -1.0, b.timerAt(), "a claim began a cooldown after the last wake-up: no more")
	})
	t.Run("IdleWakeupClaimsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		b.wakeAndFind(t, 0, 1)
		b.wakeAndFind(t, 2, 1) // 2ms later: at once too
	})
	t.Run("FollowUpClaimsEndACooldownAfterTheLastWakeup", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		require.True(t, b.w.Wakeup(b.at(0), false))
		var claims []float64
		for b.timerAt() >= 0 {
			ms := b.timerAt()
			require.True(t, b.fire(t, false), "follow-up at %vms", ms)
			claims = append(claims, ms)
			require.False(t, b.w.Finished(b.now, 0, false))
		}
		require.Equal(t, []float64{4, 8, 12, 16, 20}, claims, "every fifth of the cooldown, until one a cooldown after the wake-up")
	})
	t.Run("NoWakeupCooldownClaimsForEveryWakeup", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		b.w.cooldown = 0
		for ms := range 5 {
			require.True(t, b.w.Wakeup(b.at(float64(ms)), ms%2 == 1))
			require.False(t, b.w.Finished(b.at(float64(ms)+0.5), 100, false))
		}
		require.Equal(t, -1.0, b.timerAt(), "no follow-up claims")
	})
	t.Run("QuietAgainOnceTheBusyCooldownPassed", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		b.wakeAndFind(t, 0, 60)
		require.False(t, b.w.Wakeup(b.at(5), false), "busy")
		require.True(t, b.fire(t, false))
		require.False(t, b.w.Finished(b.at(22), 3, false))
		require.True(t, b.w.Wakeup(b.at(45), false), "the 60 events are older than a cooldown: quiet, claims at once")
	})
	t.Run("StaleTimerFiringIsIgnored", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		require.True(t, b.w.Wakeup(b.at(0), false))
		require.True(t, b.w.Wakeup(b.at(3), false))
		require.False(t, b.w.Fired(b.at(4), false), "the timer was re-armed for 7ms")
		require.Equal(t, 7.0, b.timerAt())
	})
	t.Run("TimerDuringClaimOwesOneClaimAfterIt", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		require.True(t, b.w.Wakeup(b.at(0), false))
		require.False(t, b.fire(t, true), "a claim is in flight at 4ms")
		require.True(t, b.w.Finished(b.at(6), 2, false), "the follow-up runs when it ends")
		require.False(t, b.w.Finished(b.at(7), 0, false))
	})
	t.Run("WakeupsDuringClaimCauseExactlyOneMore", func(t *testing.T) {
		t.Parallel()
		b := newWakerBundle(t)
		require.True(t, b.w.Wakeup(b.at(0), false))
		for i := range 10 {
			require.False(t, b.w.Wakeup(b.at(0.1*float64(i+1)), true), "wake-up %d during the claim", i)
		}
		require.False(t, b.w.Finished(b.at(1.5), 1, true), "another claim is still in flight")
		require.True(t, b.w.Finished(b.at(1.6), 1, false), "one claim once none is in flight")
		require.False(t, b.w.Finished(b.at(2), 1, false), "and only one")
	})
}

// Without wake-ups (WakeupDisabled, or WakeupAuto whose listener never
// comes up, e.g. behind a transaction-mode pooler) no wake-up asks
// whether the dispatcher is busy, so the claims' counts must be pruned as
// they are added, or they grow for the life of the dispatcher.
func TestWakerFoundIsBoundedWithoutWakeups(t *testing.T) {
	t.Parallel()
	b := newWakerBundle(t)
	for i := range 100_000 {
		require.False(t, b.w.Finished(b.at(float64(i)), 1, false)) // a claim a millisecond, each finding one event
	}
	require.LessOrEqual(t, len(b.w.found), 21, "found holds the claims of the last cooldown only")
}
