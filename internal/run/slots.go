package run

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/held"
)

// Start marks. Recovery charges a recovery (the poison budget, see
// MaxRecoveries) only to an event whose row shows that its attempt
// started, so that a worker that dies again and again does not dead-letter
// the events it had claimed ahead and never started. Each attempt is
// therefore marked started in the database before it starts: by the claim
// itself for the events this dispatcher will start at once, or by the
// marker (dispatcher/start.go: one statement for every event waiting to be
// marked) for an event
// that was claimed ahead and now has a handler slot.
//
// How many events a claim marks is decided when it is sent:
//
//   - all of them when handlers are quick: the recent handler calls took
//     quickHandler or less on average, and no event has had to wait
//     slowSlotWait for a slot while a handler had been running for
//     slowHandler in the last slowFor (so the batch starts as soon as it
//     arrives); and for a dispatcher with no local handlers (it publishes
//     each batch as soon as it arrives);
//   - otherwise (and so until a first handler has returned) only as many
//     as there are free handler slots, which the claim takes for them: a
//     slot frees up for a waiting event before it is free for a claim, and
//     a marked event starts in its own slot without competing.
//
// The first rule is what keeps claiming ahead free at full speed. Its cost:
// events marked by a claim are charged a recovery if the worker dies after
// the claim and before they start (in the moment between the two while
// handlers are quick; for longer if they turn slow before it is seen).
// Under at-most-once, where such a charge makes the event FAILED, only the
// second rule applies. And no claim marks a suspect (an event recovered
// before): it is marked right before its handler, which runs alone among
// suspects (see suspect.go), so that the charge above befalls an event
// once at most and a poison event cannot take innocents down with it.
const (
	// quickHandler is the average handler duration up to which handlers
	// count as quick.
	quickHandler = 5 * time.Millisecond
	// tinyHandler is the average handler duration up to which a batch's
	// handlers run on a few workers, one call after another (see work).
	tinyHandler = 20 * time.Microsecond
	// slowSlotWait is how long an event must wait for a handler slot, and
	// slowHandler how long a handler must have been running then, for
	// handlers to count as slow for the next slowFor. (A shorter run is as
	// likely the scheduler or the database being busy.)
	slowSlotWait = 10 * time.Millisecond
	slowHandler  = 100 * time.Millisecond
	slowFor      = 200 * time.Millisecond
)

// startsFor is how many of the next claim's events (at most limit) it
// marks started, and how many handler slots it took for them: the marked
// events of the claim start in those slots, so no other event can take
// them first (give back what the claim does not use with releaseSlots).
//
// In the per-key mode a claim marks none (its StartsFor): only the first
// event of each key's run starts at once, and the claim cannot tell which
// they are; each wave is marked before it starts (see ordered.go). Nor
// does one take slots when batches wait for their turn (takeSlots false:
// the claim-order mode, see claimorder.go).
func (r *Runner) startsFor(limit int, takeSlots bool) (starts, slots int) {
	if r.handlersQuick() {
		return limit, 0
	}
	if !takeSlots {
		return 0, 0 // a batch waits for its turn without a slot (see claimorder.go)
	}
	for slots < limit {
		select {
		case r.slots <- struct{}{}:
			slots++
		default:
			return slots, slots
		}
	}
	return slots, slots
}

// handlersQuick reports whether a claim may mark all its events (see the
// rules above).
func (r *Runner) handlersQuick() bool {
	if r.cfg.AtMostOnce {
		return false
	}
	if len(r.handlers) == 0 && r.fallback == nil {
		return true
	}
	avg := time.Duration(r.handlerTime.Load())
	return avg > 0 && avg <= quickHandler && int64(r.clock.Elapsed(r.started)) > r.slowUntil.Load()
}

// handlersTiny reports whether handlers are quick (see handlersQuick: so
// claims mark their events started, and no call waits for the marker) and
// take so little time on average (tinyHandler or less) that handing each
// call to a goroutine of its own would cost more than the call.
func (r *Runner) handlersTiny() bool {
	avg := time.Duration(r.handlerTime.Load())
	return avg > 0 && avg <= tinyHandler && r.handlersQuick()
}

// noteHandlerTime adds one handler call's duration to the running average
// (a weight of 1/8 for the newest).
func (r *Runner) noteHandlerTime(took time.Duration) {
	took = max(took, time.Nanosecond) // 0 means "no call yet"
	for {
		old := r.handlerTime.Load()
		avg := int64(took)
		if old > 0 {
			avg = old + (int64(took)-old)/8
		}
		if r.handlerTime.CompareAndSwap(old, max(avg, 1)) {
			return
		}
	}
}

// releaseSlots gives back n handler slots.
func (r *Runner) releaseSlots(n int) {
	for range n {
		<-r.slots
	}
}

// acquireSlot waits for one of the Concurrency handler slots. It returns
// false when the batch ends first (at the hard stop), or when allTaken
// closes first (the batch's workers took every item: no slot is needed
// any more). A wait
// of slowSlotWait or more is noted, and again every slowFor/2 while it
// lasts, so that claims mark only what can start at once (see the rules
// above).
func (r *Runner) acquireSlot(b *held.Batch, allTaken <-chan struct{}) bool {
	select {
	case r.slots <- struct{}{}:
		return true
	default:
	}
	slow := r.clock.NewTimer(slowSlotWait)
	defer slow.Stop()
	for {
		select {
		case r.slots <- struct{}{}:
			return true
		case <-slow.C:
			r.noteSlowSlot()
			slow.Reset(slowFor / 2)
		case <-b.Ctx.Done():
			return false
		case <-allTaken:
			return false
		}
	}
}

// noteSlowSlot records that an event waited slowSlotWait for a slot. If a
// handler has been running for slowHandler or more, handlers count as slow
// for the next slowFor. (A wait behind quick handlers is only the
// scheduler or the database being busy.)
func (r *Runner) noteSlowSlot() {
	now := r.clock.Mono()
	if r.held.RunningSince(now.Add(-slowHandler)) {
		r.slowUntil.Store(int64(now.Add(slowFor).Sub(r.started)))
	}
}

// markStarted makes sure the items' rows show a started attempt before
// they start, asking the marker for those the claim did not mark. It
// returns the items that may start; the others were let go (lost, or
// released at stop).
func (r *Runner) markStarted(items []*held.Item) []*held.Item {
	wait := r.held.QueueMarks(items)
	for _, it := range wait {
		select {
		case <-it.Marking():
		case <-r.held.LetGo(it):
		case <-it.Batch.Ctx.Done():
		}
	}
	return r.held.Startable(items)
}
