package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// fakeClock is a local clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type heldBundle struct {
	set   *heldSet
	clock *fakeClock
}

// setupHeld returns a held set with a lease of 10s (trusted for 8s) on a
// fake clock.
func setupHeld(t *testing.T) *heldBundle {
	t.Helper()
	clock := &fakeClock{now: time.Now()}
	return &heldBundle{set: newHeldSet(clock.Now, 10*time.Second), clock: clock}
}

// claim adds a claim of events with the given ids, all marked started,
// sent now by the fake clock.
func (b *heldBundle) claim(t *testing.T, ids ...uuid.UUID) []*item {
	t.Helper()
	batch := lease.Batch{Token: uuid.New()}
	for _, id := range ids {
		batch.Events = append(batch.Events, outbox.Event{ID: id, Type: "x", Attempt: 1})
		batch.Started = append(batch.Started, true)
	}
	items, given := b.set.add(context.Background(), batch, b.clock.Now(), 0)
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
func (b *heldBundle) finished(t *testing.T, n int) []*item {
	t.Helper()
	items := b.claim(t, ids(n)...)
	for _, it := range items {
		require.True(t, b.set.begin(it, 0))
		require.False(t, b.set.finish(it, result{}))
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
		require.Equal(t, 2, b.set.len())
		it := items[0]
		require.True(t, b.set.begin(it, time.Minute))
		require.False(t, b.set.begin(it, time.Minute), "an item begins once")
		deadline, ok := it.ctx.Deadline()
		require.True(t, ok)
		require.WithinDuration(t, time.Now().Add(time.Minute), deadline, time.Second)
		require.False(t, b.set.finish(it, result{}))
		require.True(t, received(b.set.outcomesReady), "finish signals the completer")
		taken, dropped, wait := b.set.takeOutcomes(0)
		require.Equal(t, []*item{it}, taken)
		require.Empty(t, dropped)
		require.Zero(t, wait)
		require.Equal(t, itemCompleting, it.state)
		letGo := b.set.letGo(it) // made while held, closed when let go
		require.False(t, received(letGo))
		b.set.remove(taken)
		require.True(t, received(letGo))
		require.Equal(t, 1, b.set.len())
		require.NoError(t, it.batch.ctx.Err(), "the batch lives while an item is held")
		b.set.remove(items[1:])
		require.Error(t, it.batch.ctx.Err(), "the batch ends with its last item")
		require.Zero(t, b.set.len())
	})

	// begin reads the local deadline on the clock: an item past it does
	// not start and is let go as lost, before any timer runs.
	t.Run("BeginPastDeadlineLoses", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(1)...)
		b.clock.add(8 * time.Second)
		require.False(t, b.set.begin(items[0], 0))
		require.True(t, items[0].lost)
		require.True(t, received(b.set.letGo(items[0])), "a queued item is let go at once")
		require.Zero(t, b.set.len())
	})

	// A running item whose lease is lost has its context cancelled with
	// outbox.ErrLockLost; its outcome is not queued.
	t.Run("LostWhileRunning", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		it := b.claim(t, ids(1)...)[0]
		require.True(t, b.set.begin(it, 0))
		b.set.renewed([]*item{it}, lease.RefResult{}, b.clock.Now())
		require.ErrorIs(t, context.Cause(it.ctx), outbox.ErrLockLost)
		require.Equal(t, 1, b.set.len(), "a running item is held until its handler returns")
		require.True(t, b.set.finish(it, result{}), "finish reports the loss")
		require.Zero(t, b.set.len())
		taken, _, _ := b.set.takeOutcomes(0)
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
		b.set.renewed(items, lease.RefResult{Done: []lease.Ref{renewedIt.ref()}, Busy: []lease.Ref{busy.ref()}}, b.clock.Now())
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
		require.True(t, b.set.begin(older, 0))
		require.Empty(t, b.set.stuck())
		newer := b.claim(t, id)[0]
		require.True(t, older.lost, "the newer claim took the row")
		require.Equal(t, []uuid.UUID{id}, b.set.stuck(), "claims leave it out while the older call runs")
		require.NotNil(t, newer.olderDone)
		require.False(t, received(newer.olderDone))
		require.True(t, b.set.finish(older, result{}), "its outcome is let go as lost")
		require.True(t, received(newer.olderDone))
		require.Empty(t, b.set.stuck())
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
		require.True(t, b.set.begin(older, 0))
		newer := b.claim(t, id)[0]
		b.set.remove([]*item{newer})
		third := b.claim(t, id)[0]
		require.True(t, third.behindCall, "the third claim sees the call that still runs")
		require.Same(t, older, third.older)
		require.True(t, b.set.finish(older, result{}), "its outcome is let go as lost")
		require.True(t, received(third.olderDone))
		b.set.remove([]*item{third})
		require.Zero(t, b.set.len())
		require.Empty(t, b.set.latest)
		require.Empty(t, b.set.batches, "a batch is forgotten with its last item")
	})

	// takeOutcomes leaves an outcome whose retry time has not come, says
	// how long until it has, and takes at most limit.
	t.Run("TakeOutcomesRetryAtAndLimit", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.finished(t, 3)
		items[0].record().retryAt = time.Now().Add(time.Hour)
		taken, _, wait := b.set.takeOutcomes(1)
		require.Equal(t, []*item{items[1]}, taken)
		require.Greater(t, wait, 59*time.Minute)
		taken, _, _ = b.set.takeOutcomes(0)
		require.Equal(t, []*item{items[2]}, taken)
	})

	// writeFailed applies the completer's verdicts: again (back in line),
	// lost (dropped at the next take) and given up (let go now).
	t.Run("WriteFailedVerdicts", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.finished(t, 3)
		taken, _, _ := b.set.takeOutcomes(0)
		require.Len(t, taken, 3)
		verdicts := map[*item]writeVerdict{items[0]: writeAgain, items[1]: writeLost, items[2]: writeGiveUp}
		givenUp := b.set.writeFailed(taken, func(it *item, expired bool) writeVerdict {
			require.False(t, expired)
			return verdicts[it]
		})
		require.Equal(t, []*item{items[2]}, givenUp)
		require.True(t, received(b.set.letGo(items[2])))
		taken, dropped, _ := b.set.takeOutcomes(0)
		require.Equal(t, []*item{items[0]}, taken)
		require.Equal(t, []*item{items[1]}, dropped)
		require.Equal(t, 1, b.set.len())
	})

	// Once stopping, nothing begins; the unstarted items are listed for
	// release, and idle closes when the last item is let go.
	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t)
		items := b.claim(t, ids(2)...)
		require.True(t, b.set.begin(items[0], 0))
		idle := b.set.stop()
		require.False(t, b.set.begin(items[1], 0))
		require.Equal(t, []*item{items[1]}, b.set.unstarted())
		_, _, stopping := b.set.room()
		require.True(t, stopping)
		b.set.remove(items[1:])
		require.False(t, received(idle))
		require.False(t, b.set.finish(items[0], result{}))
		taken, _, _ := b.set.takeOutcomes(0)
		b.set.remove(taken)
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
		b.set.loseExpired(items[0].batch)
		require.True(t, received(b.set.letGo(items[0])))
		require.True(t, items[1].lost)
		require.Zero(t, b.set.len())
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
		items, _ := b.set.add(context.Background(), batch, b.clock.Now(), 0)
		require.Len(t, b.set.queueMarks(items), 3)
		taken := b.set.takeMarks()
		require.Len(t, taken, 3)
		require.Empty(t, b.set.takeMarks())
		again := b.set.marked(taken, lease.RefResult{Done: []lease.Ref{items[0].ref()}, Busy: []lease.Ref{items[1].ref()}})
		require.True(t, again)
		require.True(t, received(items[0].marking))
		require.True(t, items[2].lost)
		require.Equal(t, []*item{items[0]}, b.set.startable(items))
		require.Equal(t, []*item{items[1]}, b.set.takeMarks())
	})
}
