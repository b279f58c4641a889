package run

import (
	"sync"

	"github.com/pgoutbox/pgoutbox/internal/held"
)

// Suspects. An event recovered before (recoveries > 0: a worker died, or
// lost its lease, during one of its attempts) is a suspect: it may be the
// poison event that killed the worker. No claim marks a suspect started
// (see slots.go); runSuspect runs each suspect alone among suspects,
// marked right before its handler and holding the dispatcher's suspect
// turn from before its mark until its outcome is written, so that no
// other suspect shows a started attempt meanwhile.
// When a poison event kills the process, the events charged a recovery
// with it are those its claim had marked or that ran beside it, once
// each: they come back as suspects, and no suspect runs beside another,
// so they are not dead-lettered with it after MaxRecoveries deaths.
//
// What the rule needs, and no more. A death charges every event whose row
// shows a started attempt, and cannot tell which one killed the process.
// An innocent is charged at most once by a poison event only if no two
// suspects ever show a started attempt at once: suspects are serialised
// among themselves, from before the mark until the outcome is written, or
// until the row no longer shows the attempt (a call that ignores its
// context past its timeout: its lease ran out and recovery returned the
// row, see runSuspect), which may be never written.
// Ordinary events (never recovered) need no such rule: one that runs
// beside a poison suspect is charged once, then is a suspect itself. So
// suspects must not hold up ordinary events:
//
//   - a suspect waits for the turn without a handler slot, so the other
//     events of the dispatcher run meanwhile;
//   - nor do waiting suspects take the room of other events: a dispatcher
//     holds up to a batch of them (suspectsAhead) beside its room, and
//     once it holds that many its claims leave suspects for later
//     (lease.ClaimParams.SkipSuspects), so that the events due behind them
//     are claimed and run beside the suspects' drain instead of after it
//     (under Ordering PerKey claims cannot leave them out: waiting suspects
//     count against the room there);
//   - one that waits longer than LeaseDuration (another suspect's handler
//     does not return) is released unstarted, uncharged, for any replica
//     to claim, rather than held under a renewed lease.
//
// Suspects still drain one at a time, two round trips each (the mark, then
// the outcome, written before the next suspect's mark): running them
// concurrently would let one death charge several of them, and a poison
// event could then take the suspects that run with it down with it.

// suspectsAhead is how many suspects waiting for the turn a dispatcher
// holds beside its room for other events (Concurrency + Claimers ×
// BatchSize, see claimLimit): a batch's worth. Once it holds that many,
// its claims leave suspects for later (lease.ClaimParams.SkipSuspects), so
// that the events behind them in due order are claimed and run beside the
// suspects' one-at-a-time drain instead of waiting for it. Ordered claims
// cannot leave them out: under Ordering PerKey waiting suspects count
// against the room like any event.
func (r *Runner) suspectsAhead() int { return r.cfg.BatchSize }

// roomBesideSuspects is how many of held events count against the room
// of the next claim, suspects of them waiting for their turn: those
// beyond suspectsAhead (they wait for the suspect turn without a slot).
func (r *Runner) roomBesideSuspects(held, suspects int) int {
	return held - min(suspects, r.suspectsAhead())
}

// takeSuspectTurn waits for the suspect turn. It returns false without it
// when the item is let go first, or when LeaseDuration passes first: then
// the item is released unstarted.
func (r *Runner) takeSuspectTurn(it *held.Item) bool {
	wait := r.clock.NewTimer(r.cfg.SuspectWait)
	defer wait.Stop()
	select {
	case r.suspects <- struct{}{}:
		return true
	case <-r.held.LetGo(it):
	case <-it.Batch.Ctx.Done():
	case <-wait.C:
		r.cfg.Release([]*held.Item{it}, "release of a suspect kept waiting failed; its lease will expire and be recovered")
	}
	return false
}

// runSuspect runs one suspect once it has the turn, in a handler slot of
// its own, publishes it alone if it has a destination, and gives the turn
// back once its outcome is written (the item let go) or the batch ends.
// Each suspect of a batch runs on a goroutine of its own, so that each
// waits for the turn on its own clock. The dispatcher's Run does not
// wait for these goroutines, and need not: its drain waits until the held
// set is empty,
// and each wait here but the handler call ends when the item is let go
// (released at stop, lost, or its outcome written) or its batch ends.
func (r *Runner) runSuspect(hi handledItem) {
	it := hi.item
	if !r.await(it) || !r.takeSuspectTurn(it) {
		return
	}
	r.held.TookTurn(it)
	// The turn is given back when the suspect is done, or earlier once
	// its lease was lost and its row no longer shows its attempt (a call
	// that ignores its context past its timeout, whose row recovery
	// returned): the rule needs no more, and such a call may never return.
	turnBack := sync.OnceFunc(func() { <-r.suspects })
	defer turnBack()
	ended := make(chan struct{})
	defer close(ended)
	go func(gone <-chan struct{}) {
		select {
		case <-gone:
			turnBack()
		case <-ended:
		}
	}(r.held.RowGoneSignal(it))
	if !r.acquireSlot(it.Batch, r.held.LetGo(it)) {
		return
	}
	res, publish, record := r.runHandler(it, hi.h)
	r.releaseSlots(1)
	switch {
	case publish:
		r.publish(r.dropLost([]*held.Item{it}))
	case record:
		r.finish(it, res)
	default:
		return // let go, or the batch ended, before it started
	}
	select {
	case <-r.held.LetGo(it):
	case <-it.Batch.Ctx.Done():
	}
}
