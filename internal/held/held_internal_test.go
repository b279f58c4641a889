package held

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// fakeClock is a local clock that moves only when told.
type fakeClock struct {
	start time.Time
	moved atomic.Int64 // nanoseconds added since start
}

func (c *fakeClock) Now() time.Time { return c.start.Add(time.Duration(c.moved.Load())) }

func (c *fakeClock) add(d time.Duration) { c.moved.Add(int64(d)) }

type heldBundle struct {
	set   *Set
	clock *fakeClock
}

// setupHeld returns a held set with a lease of 10s (trusted for 8s) on a
// fake clock.
func setupHeld(t *testing.T) *heldBundle {
	t.Helper()
	fake := &fakeClock{start: time.Now()}
	return &heldBundle{set: NewSet(clock.New(fake.Now), 10*time.Second), clock: fake}
}

// claim adds a claim of events with the given ids, all marked started,
// sent now by the fake clock.
func (b *heldBundle) claim(t *testing.T, ids ...uuid.UUID) []*Item {
	t.Helper()
	batch := lease.Batch{Token: uuid.New()}
	for _, id := range ids {
		batch.Events = append(batch.Events, outbox.Event{ID: id, Type: "x", Attempt: 1})
		batch.Started = append(batch.Started, true)
	}
	items, given := b.set.Add(context.Background(), batch, b.clock.Now(), 0)
	require.Zero(t, given)
	return items
}

func ids(n int) []uuid.UUID {
	out := make([]uuid.UUID, n)
	for i := range out {
		out[i] = uuid.New()
	}
	return out
}

// finished claims n events and runs each to an outcome waiting for the
// completer.
func (b *heldBundle) finished(t *testing.T, n int) []*Item {
	t.Helper()
	items := b.claim(t, ids(n)...)
	for _, it := range items {
		require.True(t, b.set.Begin(it, 0))
		require.False(t, b.set.Finish(it, Result{}))
	}
	return items
}

// received reports whether ch is closed or had a signal (taken).
func received(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestHeldSet(t *testing.T) {
	t.Parallel()

	// One event's walk: add, begin, finish, takeOutcomes, remove; the
	// batch's context ends with its last item.
	t.Run("AddBeginFinishTakeRemove", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(2)...)
		require.Equal(t, 2, b.set.Len())
		it := items[0]
		require.True(t, b.set.Begin(it, time.Minute))
		require.False(t, b.set.Begin(it, time.Minute), "an item begins once")
		deadline, ok := it.ctx.Deadline()
		require.True(t, ok)
		require.WithinDuration(t, time.Now().Add(time.Minute), deadline, time.Second)
		require.False(t, b.set.Finish(it, Result{}))
		require.True(t, received(b.set.outcomesReady), "finish signals the completer")
		taken, dropped, wait := b.set.TakeOutcomes(0)
		require.Equal(t, []*Item{it}, taken)
		require.Empty(t, dropped)
		require.Zero(t, wait)
		require.Equal(t, Completing, it.state)
		letGo := b.set.LetGo(it) // made while held, closed when let go
		require.False(t, received(letGo))
		b.set.Remove(taken)
		require.True(t, received(letGo))
		require.Equal(t, 1, b.set.Len())
		require.NoError(t, it.Batch.Ctx.Err(), "the batch lives while an item is held")
		b.set.Remove(items[1:])
		require.Error(t, it.Batch.Ctx.Err(), "the batch ends with its last item")
		require.Zero(t, b.set.Len())
	})

	// begin reads the local deadline on the clock: an item past it does
	// not start and is let go as lost, before any timer runs.
	t.Run("BeginPastDeadlineLoses", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(1)...)
		b.clock.add(8 * time.Second)
		require.False(t, b.set.Begin(items[0], 0))
		require.True(t, items[0].lost)
		require.True(t, received(b.set.LetGo(items[0])), "a queued item is let go at once")
		require.Zero(t, b.set.Len())
	})

	// A running item whose lease is lost has its context cancelled with
	// outbox.ErrLockLost; its outcome is not queued.
	t.Run("LostWhileRunning", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		it := b.claim(t, ids(1)...)[0]
		require.True(t, b.set.Begin(it, 0))
		b.set.Renewed([]*Item{it}, lease.RefResult{}, b.clock.Now())
		require.ErrorIs(t, context.Cause(it.ctx), outbox.ErrLockLost)
		require.Equal(t, 1, b.set.Len(), "a running item is held until its handler returns")
		require.True(t, b.set.Finish(it, Result{}), "finish reports the loss")
		require.Zero(t, b.set.Len())
		taken, _, _ := b.set.TakeOutcomes(0)
		require.Empty(t, taken)
	})

	// A renewal credits exactly the (id, token) it renewed; a busy row
	// keeps its deadline; a missing one is lost unless the completer holds
	// its outcome.
	t.Run("RenewedCreditsByRef", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(4)...)
		renewedIt, busy, missing, held := items[0], items[1], items[2], items[3]
		before := busy.deadline
		held.maybeWritten = true
		b.clock.add(time.Second)
		b.set.Renewed(items, lease.RefResult{Done: []lease.Ref{renewedIt.Ref()}, Busy: []lease.Ref{busy.Ref()}}, b.clock.Now())
		require.Equal(t, b.clock.Now().Add(8*time.Second), renewedIt.deadline)
		require.Equal(t, before, busy.deadline)
		require.False(t, busy.lost)
		require.True(t, missing.lost)
		require.False(t, held.lost, "the completer decides an outcome that may be written")
	})

	// A newer claim of an event still held (its handler running) loses
	// the older item's lease (the claim took the row), lists the event as
	// stuck until the older call ends, and tells the newer item when it
	// ended.
	t.Run("NewerClaimLosesOlder", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		id := uuid.New()
		older := b.claim(t, id)[0]
		require.True(t, b.set.Begin(older, 0))
		require.Empty(t, b.set.Stuck())
		newer := b.claim(t, id)[0]
		require.True(t, older.lost, "the newer claim took the row")
		require.Equal(t, []uuid.UUID{id}, b.set.Stuck(), "claims leave it out while the older call runs")
		require.NotNil(t, newer.OlderDone)
		require.False(t, received(newer.OlderDone))
		require.True(t, b.set.Finish(older, Result{}), "its outcome is let go as lost")
		require.True(t, received(newer.OlderDone))
		require.Empty(t, b.set.Stuck())
		require.Zero(t, b.set.lostHeld)
	})

	// When the newer item is let go while the older call still runs, the
	// older item is the event's newest again: a third claim sees the call
	// and waits behind it, and once every item is let go the event is no
	// longer known.
	t.Run("OlderCallIsNewestAgain", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		id := uuid.New()
		older := b.claim(t, id)[0]
		require.True(t, b.set.Begin(older, 0))
		newer := b.claim(t, id)[0]
		b.set.Remove([]*Item{newer})
		third := b.claim(t, id)[0]
		require.True(t, third.BehindCall, "the third claim sees the call that still runs")
		require.Same(t, older, third.older)
		require.True(t, b.set.Finish(older, Result{}), "its outcome is let go as lost")
		require.True(t, received(third.OlderDone))
		b.set.Remove([]*Item{third})
		require.Zero(t, b.set.Len())
		require.Empty(t, b.set.latest)
		require.Empty(t, b.set.batches, "a batch is forgotten with its last item")
	})

	// takeOutcomes leaves an outcome whose retry time has not come, says
	// how long until it has, and takes at most limit.
	t.Run("TakeOutcomesRetryAtAndLimit", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.finished(t, 3)
		items[0].Record().RetryAt = time.Now().Add(time.Hour)
		taken, _, wait := b.set.TakeOutcomes(1)
		require.Equal(t, []*Item{items[1]}, taken)
		require.Greater(t, wait, 59*time.Minute)
		taken, _, _ = b.set.TakeOutcomes(0)
		require.Equal(t, []*Item{items[2]}, taken)
	})

	// writeFailed applies the completer's verdicts: again (back in line),
	// lost (dropped at the next take) and given up (let go now).
	t.Run("WriteFailedVerdicts", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.finished(t, 3)
		taken, _, _ := b.set.TakeOutcomes(0)
		require.Len(t, taken, 3)
		verdicts := map[*Item]WriteVerdict{items[0]: WriteAgain, items[1]: WriteLost, items[2]: WriteGiveUp}
		givenUp := b.set.WriteFailed(taken, func(it *Item, expired bool) WriteVerdict {
			require.False(t, expired)
			return verdicts[it]
		})
		require.Equal(t, []*Item{items[2]}, givenUp)
		require.True(t, received(b.set.LetGo(items[2])))
		taken, dropped, _ := b.set.TakeOutcomes(0)
		require.Equal(t, []*Item{items[0]}, taken)
		require.Equal(t, []*Item{items[1]}, dropped)
		require.Equal(t, 1, b.set.Len())
	})

	// The items a stop lists for release are the stop's: a key's run that
	// gives the same items back afterwards (ReleaseQueued, as an ordered
	// run does when its chain stops) gives back none, so they are not
	// released twice and their result is not written while the stop's
	// release reads it (a race -race saw in the Watermill adapter's
	// ordered suite).
	t.Run("UnstartedAreTheStops", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(2)...)
		b.set.Stop()
		require.Equal(t, items, b.set.Unstarted())
		require.Zero(t, b.set.ReleaseQueued(items))
		require.Zero(t, b.set.Waiting(), "nothing given back to the completer")
		require.Equal(t, Result{}, items[0].Result())
		_, ok := b.set.Outcome(items[0])
		require.False(t, ok, "never began: no outcome, so an ordered chain stops there")
		b.set.Remove(items)
		require.Zero(t, b.set.Len())
	})

	// Once stopping, nothing begins; the unstarted items are listed for
	// release, and idle closes when the last item is let go.
	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(2)...)
		require.True(t, b.set.Begin(items[0], 0))
		idle := b.set.Stop()
		require.False(t, b.set.Begin(items[1], 0))
		require.Equal(t, []*Item{items[1]}, b.set.Unstarted())
		_, _, stopping := b.set.Room()
		require.True(t, stopping)
		b.set.Remove(items[1:])
		require.False(t, received(idle))
		require.False(t, b.set.Finish(items[0], Result{}))
		taken, _, _ := b.set.TakeOutcomes(0)
		b.set.Remove(taken)
		require.True(t, received(idle))
	})

	// The batch's deadline timer loses the queued items past their local
	// deadline, leaving alone an outcome the completer holds.
	t.Run("DeadlineTimer", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		b.clock.add(-8 * time.Second) // the claim was sent a trusted lease ago
		items := b.claim(t, ids(2)...)
		b.clock.add(8 * time.Second)
		// The timer would fire in 8s of real time: run what it runs now.
		b.set.loseExpired(items[0].Batch)
		require.True(t, received(b.set.LetGo(items[0])))
		require.True(t, items[1].lost)
		require.Zero(t, b.set.Len())
	})

	// Marks: a queued mark is taken once; a busy row goes back in line; a
	// missing one is lost; a done one may start.
	t.Run("Marks", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		batch := lease.Batch{Token: uuid.New(), Started: []bool{false, false, false}}
		for range 3 {
			batch.Events = append(batch.Events, outbox.Event{ID: uuid.New()})
		}
		items, _ := b.set.Add(context.Background(), batch, b.clock.Now(), 0)
		require.Len(t, b.set.QueueMarks(items), 3)
		taken := b.set.TakeMarks()
		require.Len(t, taken, 3)
		require.Empty(t, b.set.TakeMarks())
		again := b.set.Marked(taken, lease.RefResult{Done: []lease.Ref{items[0].Ref()}, Busy: []lease.Ref{items[1].Ref()}})
		require.True(t, again)
		require.True(t, received(items[0].marking))
		require.True(t, items[2].lost)
		require.Equal(t, []*Item{items[0]}, b.set.Startable(items))
		require.Equal(t, []*Item{items[1]}, b.set.TakeMarks())
	})
}
