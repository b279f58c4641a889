package dispatcher

import (
	"cmp"
	"context"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// heldSet is the events this process holds: claimed, and not yet let go.
// Every change of an event's state in this process is one of its methods,
// named for the transition:
//
//	add ─▶ begin ─▶ finish ─▶ takeOutcomes ─▶ (written) remove
//	 │       │        │            │  └─ writeFailed ─▶ back in line, or let go
//	 │       └────────┴── lost ────┴─▶ let go (renewed, loseExpired, begin)
//	 └─ unstarted (at stop: the completer releases them) ─▶ remove
//
// Locks. heldSet.mu is a leaf: while it is held nothing else is locked,
// no statement runs and nothing outside this file is called (no hook,
// handler or OnError); the only calls out are cancel functions of the
// set's own contexts and non-blocking sends on its signal channels.
// Whoever needs another lock as well (Dispatcher.mu, leaseWrites, the log
// limiter) takes it before or after, never around, a held-set call, so no
// order between them arises.
type heldSet struct {
	now func() time.Time // the local clock of lease deadlines (Config.now, set by tests)
	// realClock: now is time.Now, so that begin reads the clock once for
	// the start time and the deadline.
	realClock bool
	trust     time.Duration // how long a claim or renewal is trusted: 4/5 of LeaseDuration

	// outcomesReady is signalled when an outcome waits for the completer;
	// freed when an event is let go (room for claims).
	outcomesReady chan struct{}
	freed         chan struct{}
	// marksWanted is signalled when items wait for the marker.
	marksWanted chan struct{}

	mu sync.Mutex
	// batches are the claims with an item held, count the items held
	// (their held field is set).
	batches  map[*heldBatch]struct{}
	count    int
	latest   map[uuid.UUID]*item // the newest held item of each event id
	outcomes []*item             // outcomes waiting for the completer
	toMark   []*item             // items waiting for the marker (see start.go)
	stopping bool                // no handler may start any more
	idle     chan struct{}       // closed when the set empties while stopping

	// inWaves: batches run in waves (Ordering PerKey, see ordered.go),
	// each waiting for every call of the one before, suspects included;
	// otherwise a batch's publish waits for its handlers and publishes
	// but not its suspects, and its queued events wait for a slot only.
	// Set before the set is used.
	inWaves bool

	// suspectsWaiting counts the held suspects that have not taken the
	// suspect turn (see suspect.go), lostHeld the held items whose lease
	// was lost (see stuck).
	suspectsWaiting, lostHeld int
}

// newHeldSet returns an empty set whose lease deadlines are on now's
// clock; nil means time.Now.
func newHeldSet(now func() time.Time, leaseDuration time.Duration) *heldSet {
	s := &heldSet{
		now: now, trust: leaseDuration - leaseDuration/5,
		outcomesReady: make(chan struct{}, 1), freed: make(chan struct{}, 1), marksWanted: make(chan struct{}, 1),
		batches: make(map[*heldBatch]struct{}), latest: make(map[uuid.UUID]*item),
	}
	if now == nil {
		s.now, s.realClock = time.Now, true
	}
	return s
}

// all yields every item held. The caller holds s.mu.
func (s *heldSet) all() iter.Seq[*item] {
	return func(yield func(*item) bool) {
		for b := range s.batches {
			for _, it := range b.items {
				if it.held && !yield(it) {
					return
				}
			}
		}
	}
}

// heldBatch is the events of one claim: one token, one timer for their
// local deadlines.
type heldBatch struct {
	token     uuid.UUID
	claimedAt time.Time // local time the claim came back
	ctx       context.Context
	cancel    context.CancelCauseFunc
	items     []*item
	remaining int         // items still held; guarded by heldSet.mu
	timer     *time.Timer // fires at the earliest local deadline of its items
	// timeout is the context, under ctx, whose deadline is timeoutAt: the
	// handler timeout of the batch's events that started in the same
	// timeoutGrain. Handlers starting together share its timer;
	// cancelling ctx releases them all. Guarded by heldSet.mu.
	timeout   context.Context
	timeoutAt time.Time
	// cancelTimeout stops the timer of the latest timeout context. Each is
	// also stopped with ctx, when the batch ends; this only satisfies the
	// rule that no cancel function is dropped.
	cancelTimeout context.CancelFunc
}

// itemState is where one held event is in its life in this process.
type itemState uint8

const (
	itemQueued     itemState = iota // claimed, handler not started
	itemRunning                     // handler or publisher running
	itemFinished                    // outcome waits for the completer
	itemCompleting                  // outcome is being written
)

// item is one held event. The fields marked "guarded" are guarded by
// heldSet.mu; the completer's own record is read and written by the
// completer goroutine alone.
//
// A claim holds its items in one allocation, and the per-event work
// touches most of them, so the fields are kept small: the event is the
// claim's own (lease.Batch.Events, which nothing changes after the claim),
// and what only a failed write or an overrun needs is made on first need
// (writes, warn).
type item struct {
	event  *outbox.Event // the claim's event; never changed
	batch  *heldBatch
	ctx    context.Context // set by begin: the call's context, cancelled when this event's lease is lost
	cancel context.CancelCauseFunc
	// deadline is when this process stops trusting the lease (local
	// clock): set at claim, moved by each renewal of this very (id,
	// token). Guarded.
	deadline time.Time
	// writes is the completer's record of this outcome's failed writes
	// and of the failure it writes (nil until the first of them); the
	// completer's alone.
	writes *writeRecord
	// marking is closed by the marker once the start is marked (see
	// marked). Guarded.
	marking chan struct{}
	// key is the order key the claim read (ordered claims only; "" for
	// none, see lease.Batch.Keys). Set before runBatch starts.
	key string
	// dest is the event's destination (Config.RouteFunc; "" when it is
	// not published), routed once by runBatch before anything reads it.
	dest string
	// waited is how long the event had been due when the claim took it
	// (database clock).
	waited time.Duration
	// startedAt is when its handler started, and ran how long until its
	// outcome was handed to the completer; guarded.
	startedAt time.Time
	ran       time.Duration
	letGo     chan struct{}   // closed when the item is let go; made on first need (letGoLocked); guarded
	olderDone <-chan struct{} // letGo of an older item of the same event, lost but still running, must end first
	// older is the item of the same event that was the newest held when
	// this one was added (nil for none); guarded. When this one is let go
	// first, older becomes the event's newest held item again (see
	// removeLocked), so that a later claim still sees a call that runs.
	older  *item
	result result // set when state becomes itemFinished

	// callDeadline is when the running call (phase: its handler, or its
	// publish) passes its timeout; zero for none (NoHandlerTimeout, or
	// waiting for its batch's publish). Past it the heartbeat no longer
	// renews the lease, and the call is an overrun (see overrun.go);
	// warn is when its WARN is due (nil until the first). Guarded.
	callDeadline time.Time
	warn         *overrunWarn
	// gone is closed once rowGone is set, made on first need. Guarded.
	gone chan struct{}

	state itemState // guarded
	phase callPhase // guarded, see callDeadline
	// held: the set holds the item (added, not let go yet). Guarded.
	held bool
	// newest: the item is the newest held of its event (the set's latest
	// entry for its id). Guarded.
	newest bool
	lost   bool // the lease is gone; guarded
	// maybeWritten: a write of this outcome reported an error but may
	// have taken effect (its reply was lost). Guarded; written by the
	// completer only.
	maybeWritten bool
	// marked: the row shows that this attempt started (see start.go).
	// Guarded.
	marked bool
	// hasSlot: the claim took a handler slot for this item (see
	// startsFor). Set before runBatch starts; read by it only.
	hasSlot bool
	// suspect: the row was recovered before (see lease.Batch.Suspect);
	// set by add, read only after.
	suspect bool
	// behindCall: olderDone is the end of a call that was still running
	// when this item was claimed. Set by add, read only after.
	behindCall bool
	// awaitsTurn: a suspect that has not taken the suspect turn yet.
	// Guarded.
	awaitsTurn bool
	// rowGone: the lease was lost and the row no longer shows this
	// attempt (recovery returned it, or a later claim took it), so a
	// suspect's call that still runs no longer needs the suspect turn
	// (see runSuspect). Guarded.
	rowGone bool
}

// writeRecord is the completer's record of the failed writes of one
// outcome: how many, how many the database refused, how many past the
// local deadline, and when to try again; and the failure it writes, as
// it first wrote it (see completer.failureToWrite).
type writeRecord struct {
	tries, refusals, late int
	retryAt               time.Time
	failure               lease.Failure
	decided               bool // failure is set
}

// record returns the item's write record, made on first need. The
// completer's goroutine only.
func (it *item) record() *writeRecord {
	if it.writes == nil {
		it.writes = new(writeRecord)
	}
	return it.writes
}

// refusals is how many times the database refused to record the item's
// outcome, tries how many writes of it failed.
func (it *item) refusals() int {
	if it.writes == nil {
		return 0
	}
	return it.writes.refusals
}

func (it *item) tries() int {
	if it.writes == nil {
		return 0
	}
	return it.writes.tries
}

// retryAt is when the completer may write the item's outcome again (zero:
// at once).
func (it *item) retryAt() time.Time {
	if it.writes == nil {
		return time.Time{}
	}
	return it.writes.retryAt
}

// overrunWarn is when an overrun's next WARN is due, and the wait after
// that (see heldSet.overruns).
type overrunWarn struct {
	next  time.Time
	every time.Duration
}

func (it *item) ref() lease.Ref { return lease.Ref{ID: it.event.ID, Token: it.batch.token} }

// deadlineFrom is when this process stops trusting a lease claimed or
// renewed at sentAt: the lease duration less a fifth of it, measured from
// before the statement was sent, so that it passes before the database's
// lease_until does.
func (s *heldSet) deadlineFrom(sentAt time.Time) time.Time { return sentAt.Add(s.trust) }

// add holds the events of a claim sent at sentAt, under one batch whose
// context is under parent. The marked events among the first slots get a
// handler slot each (hasSlot); add returns the items and how many slots
// it gave.
func (s *heldSet) add(parent context.Context, b lease.Batch, sentAt time.Time, slots int) (items []*item, given int) {
	hb := &heldBatch{token: b.Token, claimedAt: time.Now()}
	hb.ctx, hb.cancel = context.WithCancelCause(parent)
	items = make([]*item, len(b.Events))
	store := make([]item, len(b.Events)) // one allocation for the batch
	deadline := s.deadlineFrom(sentAt)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range b.Events {
		e := &b.Events[i]
		it := &store[i] // zeroed: set field by field, not copied whole
		it.event, it.batch, it.deadline, it.held, it.newest = e, hb, deadline, true, true
		it.marked, it.suspect = b.Started[i], i < len(b.Suspect) && b.Suspect[i]
		if it.suspect {
			it.awaitsTurn = true
			s.suspectsWaiting++
		}
		if i < len(b.Waited) {
			it.waited = b.Waited[i]
		}
		if i < len(b.Keys) {
			it.key = b.Keys[i]
		}
		if it.marked && given < slots {
			it.hasSlot = true
			given++
		}
		if prev := s.latest[e.ID]; prev != nil {
			prev.newest = false
			for o := prev; o != nil && o.held; o = o.older {
				if o.state == itemRunning {
					// This claim took the row: the older lease is gone,
					// whatever the heartbeat or the local deadline have
					// seen yet, and its call may never return (see await).
					s.loseLocked(o)
					s.rowGoneLocked(o)
					it.behindCall = true
				}
			}
			it.older, it.olderDone = prev, s.letGoLocked(prev)
		}
		items[i] = it
		s.latest[e.ID] = it
	}
	hb.items, hb.remaining = items, len(items)
	s.count += len(items)
	s.batches[hb] = struct{}{}
	hb.timer = time.AfterFunc(deadline.Sub(s.now()), func() { s.loseExpired(hb) })
	return items, given
}

// begin moves a queued item to running and gives it its context, with a
// deadline timeout from now when timeout > 0. It returns false when the
// item may not start: the dispatcher is stopping (the item will be
// released), or the lease is lost or past its local deadline (the item is
// let go as lost). The deadline is read here, on the clock, not left to
// the timer that marks items lost: after a pause of the process the timer
// may not have run yet when the handler would start.
func (s *heldSet) begin(it *item, timeout time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || it.lost || it.state != itemQueued {
		return false
	}
	startedAt := time.Now()
	now := startedAt
	if !s.realClock {
		now = s.now()
	}
	if !now.Before(it.deadline) { // expired
		s.loseLocked(it)
		return false
	}
	it.state = itemRunning
	it.startedAt = startedAt
	parent := it.batch.ctx
	if timeout > 0 {
		parent = it.batch.timeoutContext(it.startedAt.Add(timeout), timeout)
		it.callDeadline, it.phase = it.startedAt.Add(timeout+timeoutGrain(timeout)), phaseHandler
	}
	it.ctx, it.cancel = context.WithCancelCause(parent)
	return true
}

// timeoutContext returns a context under the batch's whose deadline is at
// or after at, by less than timeoutGrain(timeout): events of one batch
// that start together share one timer instead of arming one each. The
// caller holds heldSet.mu.
func (b *heldBatch) timeoutContext(at time.Time, timeout time.Duration) context.Context {
	grain := timeoutGrain(timeout)
	if b.timeout != nil && at.Before(b.timeoutAt) && !at.Before(b.timeoutAt.Add(-grain)) {
		return b.timeout // at's grain is the latest one's (without Truncate, which divides)
	}
	at = at.Truncate(grain).Add(grain)
	if b.timeout == nil || !b.timeoutAt.Equal(at) {
		b.timeout, b.cancelTimeout = context.WithDeadline(b.ctx, at)
		b.timeoutAt = at
	}
	return b.timeout
}

// timeoutGrain is how much longer than HandlerTimeout a handler may get so
// that handlers can share a timer: a 64th of the timeout, at most 10ms.
func timeoutGrain(timeout time.Duration) time.Duration {
	return max(min(timeout/64, 10*time.Millisecond), time.Microsecond)
}

// loseIfExpired gives up a started item whose local deadline has passed
// (read on the clock, like begin), and reports whether the item is lost.
func (s *heldSet) loseIfExpired(it *item) (lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !it.lost && s.expired(it) {
		s.loseLocked(it)
	}
	return it.lost
}

// finish hands an item's result to the completer. An item whose lease
// was lost meanwhile is let go instead, and finish reports it lost (the
// caller reports outbox.ErrLockLost).
func (s *heldSet) finish(it *item, res result) (lost bool) {
	s.mu.Lock()
	if it.lost {
		s.removeLocked(it)
		s.mu.Unlock()
		return true
	}
	it.state, it.result = itemFinished, res
	if it.ran = res.ran; it.ran == 0 && !it.startedAt.IsZero() {
		it.ran = time.Since(it.startedAt)
	}
	s.outcomes = append(s.outcomes, it)
	s.mu.Unlock()
	signal(s.outcomesReady)
	return false
}

// releaseQueued hands the completer, to be released unstarted (no
// attempt spent), those of items still held whose handler never began
// and whose lease is not lost: the rest of a key's run that stopped (see
// ordered.go). It returns how many it handed over.
func (s *heldSet) releaseQueued(items []*item) (n int) {
	return s.giveBack(items, result{release: true})
}

// giveBack hands the completer res (a release) for those of items still
// held whose handler never began and whose lease is not lost, and returns
// how many it handed over.
func (s *heldSet) giveBack(items []*item, res result) (n int) {
	s.mu.Lock()
	for _, it := range items {
		if it.held && !it.lost && it.state == itemQueued {
			it.state, it.result = itemFinished, res
			s.outcomes = append(s.outcomes, it)
			n++
		}
	}
	s.mu.Unlock()
	if n > 0 {
		signal(s.outcomesReady)
	}
	return n
}

// outcome returns the result this process gave an item's attempt, and
// false when it gave none: the item never began, or its lease was lost.
func (s *heldSet) outcome(it *item) (res result, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.lost || it.state == itemQueued || it.state == itemRunning {
		return result{}, false
	}
	return it.result, true
}

// takeOutcomes moves up to limit (0: any number) of the outcomes whose
// retry time has come to completing, lets go of those whose lease was
// lost (dropped), and leaves the others waiting. It returns the time until
// the earliest waiting retry is due (0 for none).
func (s *heldSet) takeOutcomes(limit int) (items, dropped []*item, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var later []*item
	items = make([]*item, 0, len(s.outcomes)) // most are taken: one allocation
	for _, it := range s.outcomes {
		switch {
		case it.lost:
			s.removeLocked(it)
			dropped = append(dropped, it)
		case it.retryAt().After(now):
			later = append(later, it)
			if w := it.retryAt().Sub(now); wait == 0 || w < wait {
				wait = w
			}
		case limit > 0 && len(items) >= limit:
			later = append(later, it) // the next round takes it
		default:
			it.state = itemCompleting
			items = append(items, it)
		}
	}
	s.outcomes = later
	return items, dropped, wait
}

// writeVerdict is what the completer decides for an outcome whose write
// failed.
type writeVerdict int

const (
	writeAgain  writeVerdict = iota // wait for its retryAt, then write again
	writeLost                       // the lease can no longer be trusted: let go as lost
	writeGiveUp                     // failed too often: let go now
)

// writeFailed puts the outcomes of a failed write back in line or lets
// them go, as judge decides for each item still held (judge is told
// whether the item's local deadline has passed; it runs under the lock,
// so it must only read and update the item). It returns the items given
// up.
func (s *heldSet) writeFailed(items []*item, judge func(it *item, expired bool) writeVerdict) (givenUp []*item) {
	s.mu.Lock()
	for _, it := range items {
		if !it.held {
			continue
		}
		switch judge(it, s.expired(it)) {
		case writeGiveUp:
			s.removeLocked(it)
			givenUp = append(givenUp, it)
		case writeLost:
			s.loseLocked(it)
			it.state = itemFinished
			s.outcomes = append(s.outcomes, it)
		default:
			it.state = itemFinished
			s.outcomes = append(s.outcomes, it)
		}
	}
	s.mu.Unlock()
	signal(s.outcomesReady)
	return givenUp
}

// mayHaveWritten notes that a write of items may have taken effect
// although it reported an error (its reply was lost, or it timed out):
// the completer, not the heartbeat or the deadline timer, then decides
// their fate (see completerHolds).
func (s *heldSet) mayHaveWritten(items []*item) {
	s.mu.Lock()
	for _, it := range items {
		it.maybeWritten = true
	}
	s.mu.Unlock()
}

// owned returns the items this process still holds (in a new slice).
func (s *heldSet) owned(items []*item) []*item {
	return s.keep(items, func(*item) bool { return true })
}

// keep returns the items this process still holds for which ok holds (in
// a new slice); ok runs under s.mu.
func (s *heldSet) keep(items []*item, ok func(*item) bool) []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make([]*item, 0, len(items)) // most are kept: one allocation
	for _, it := range items {
		if it.held && ok(it) {
			kept = append(kept, it)
		}
	}
	return kept
}

// live lists the held items whose lease is still worth renewing: not
// lost, not a call running past its timeout (see overrun.go), whose
// lease is left to expire so that another replica delivers the event,
// and not an event waiting for its batch's publish behind such a call
// (phaseAwaitPublish), nor under PerKey a queued event of its batch (a
// later wave): they wait for the stuck call, so their turn may never
// come, and renewing them would hold them for ever. Queued ones are let
// go unstarted at their local deadline, uncharged, for any claim.
func (s *heldSet) live() []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var stalled map[*heldBatch]bool // batches whose publish waits for a call past its timeout
	for it := range s.all() {
		if overran(it, now) && (!it.suspect || s.inWaves) {
			if stalled == nil {
				stalled = make(map[*heldBatch]bool)
			}
			stalled[it.batch] = true
		}
	}
	items := make([]*item, 0, s.count)
	for it := range s.all() {
		behindStuck := stalled[it.batch] && (it.phase == phaseAwaitPublish && (!it.suspect || s.inWaves) ||
			s.inWaves && it.state == itemQueued) // a later wave waits for the stuck one
		if !it.lost && !overran(it, now) && !behindStuck {
			items = append(items, it)
		}
	}
	return items
}

// overran reports whether the item's call is running past its timeout at
// now. The caller holds heldSet.mu.
func overran(it *item, now time.Time) bool {
	return it.state == itemRunning && !it.callDeadline.IsZero() && now.After(it.callDeadline)
}

// callStarts sets the call deadline of started items whose next call (a
// publish, or none: zero) starts now.
func (s *heldSet) callStarts(items []*item, deadline time.Time, phase callPhase) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		it.callDeadline, it.phase = deadline, phase
	}
}

// overrunCall is a call running past its timeout: what its WARN says.
type overrunCall struct {
	id            uuid.UUID
	eventType     string
	phase         string
	running, over time.Duration
	first         bool // the first time it is reported
}

// overrunning counts the calls running past their timeout at now, and
// returns the earliest of their timeouts.
func (s *heldSet) overrunning(now time.Time) (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for it := range s.all() {
		if overran(it, now) {
			n++
			if oldest.IsZero() || it.callDeadline.Before(oldest) {
				oldest = it.callDeadline
			}
		}
	}
	return n, oldest
}

// overruns lists the calls running past their timeout at now whose WARN
// is due (the first at once, then after warnFirst, doubling, up to
// warnMax apart), moving their next WARN on.
func (s *heldSet) overruns(now time.Time, warnFirst, warnMax time.Duration) (due []overrunCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for it := range s.all() {
		if !overran(it, now) || it.warn != nil && now.Before(it.warn.next) {
			continue
		}
		first := it.warn == nil
		if first {
			it.warn = &overrunWarn{every: warnFirst}
		} else {
			it.warn.every = min(2*it.warn.every, warnMax)
		}
		it.warn.next = now.Add(it.warn.every)
		due = append(due, overrunCall{id: it.event.ID, eventType: it.event.Type, phase: it.phase.String(),
			running: now.Sub(it.startedAt), over: now.Sub(it.callDeadline), first: first})
	}
	return due
}

// running lists up to limit of the calls running now, oldest first, and
// how many run in all.
func (s *heldSet) running(limit int) (calls []RunningEvent, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for it := range s.all() {
		if it.state == itemRunning {
			n++
			calls = append(calls, RunningEvent{ID: it.event.ID, Type: it.event.Type, Running: now.Sub(it.startedAt)})
		}
	}
	slices.SortFunc(calls, func(a, b RunningEvent) int { return cmp.Compare(b.Running, a.Running) })
	return calls[:min(len(calls), limit)], n
}

// stuck lists the events of held items whose lease was lost while their
// call still runs (or its outcome waits to be dropped): a claim leaves
// them out (lease.ClaimParams.Skip), so that another replica takes them
// rather than this one hold them behind that call.
func (s *heldSet) stuck() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostHeld == 0 {
		return nil // the common case: no walk of the held set per claim
	}
	var ids []uuid.UUID
	for it := range s.all() {
		if it.lost {
			ids = append(ids, it.event.ID)
		}
	}
	return ids
}

// stillLive returns the items still held and not lost (in a new slice).
func (s *heldSet) stillLive(items []*item) []*item {
	return s.keep(items, func(it *item) bool { return !it.lost })
}

// renewed applies a renewal sent at sentAt: the items in renewed get the
// new local deadline, the items in busy (their rows were locked elsewhere
// at that moment) keep theirs, and the others are lost, unless the
// completer holds their outcome (see completerHolds): a row that no
// longer shows the lease may show the outcome its write recorded.
func (s *heldSet) renewed(items []*item, res lease.RefResult, sentAt time.Time) {
	keep := make(map[lease.Ref]bool, len(res.Done)+len(res.Busy))
	for _, r := range res.Done {
		keep[r] = true
	}
	for _, r := range res.Busy {
		keep[r] = false
	}
	deadline := s.deadlineFrom(sentAt)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		if !it.held {
			continue
		}
		renewed, known := keep[it.ref()]
		switch {
		case renewed:
			it.deadline = later(it.deadline, deadline)
		case !known && !completerHolds(it):
			s.loseLocked(it)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// loseExpired runs when a batch's deadline timer fires: every held item
// of the batch whose local deadline has passed is lost, and the timer is
// set for the earliest deadline of the rest. Items the completer holds
// are left to it: it checks their deadline when a write fails.
func (s *heldSet) loseExpired(b *heldBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, it := range b.items {
		if !it.held || it.lost || completerHolds(it) {
			continue
		}
		if s.expired(it) {
			s.loseLocked(it)
			continue
		}
		if next.IsZero() || it.deadline.Before(next) {
			next = it.deadline
		}
	}
	if !next.IsZero() {
		b.timer.Reset(max(next.Sub(s.now()), time.Millisecond))
	}
}

// expired reports whether the item's local deadline has passed. The
// caller holds s.mu.
func (s *heldSet) expired(it *item) bool { return !s.now().Before(it.deadline) }

// completerHolds reports whether the completer decides the fate of an
// item's lease: its outcome is being written, or an earlier write of it
// may have taken effect although its reply was lost (then the row may no
// longer show the lease, and the next try reads what it shows). The
// caller holds heldSet.mu.
func completerHolds(it *item) bool { return it.state == itemCompleting || it.maybeWritten }

// loseLocked gives up an item whose lease is gone: its context is
// cancelled, and it is let go at once if it never started. A running item
// is let go when its handler returns; a waiting outcome when the completer
// picks it up. The caller holds s.mu.
func (s *heldSet) loseLocked(it *item) {
	if !it.lost && it.held {
		s.lostHeld++
	}
	it.lost = true
	if it.cancel != nil {
		it.cancel(outbox.ErrLockLost)
	}
	if it.state == itemQueued {
		s.removeLocked(it)
	}
}

// rowGoneLocked notes that the row of a lost item no longer shows its
// attempt. The caller holds s.mu.
func (s *heldSet) rowGoneLocked(it *item) {
	if !it.rowGone {
		it.rowGone = true
		if it.gone != nil {
			close(it.gone)
		}
	}
}

// rowGoneSignal returns a channel closed once the item's row no longer
// shows its attempt after its lease was lost (see rowGoneLocked).
func (s *heldSet) rowGoneSignal(it *item) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.gone == nil {
		it.gone = make(chan struct{})
		if it.rowGone {
			close(it.gone)
		}
	}
	return it.gone
}

// recovered notes that a recovery returned the rows of ids: the held
// items of those events whose lease was lost no longer show their attempt.
func (s *heldSet) recovered(ids ...uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		for o := s.latest[id]; o != nil && o.held; o = o.older {
			if o.lost {
				s.rowGoneLocked(o)
			}
		}
	}
}

// letGo returns a channel that is closed when the item is let go.
func (s *heldSet) letGo(it *item) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.letGoLocked(it)
}

// letGoLocked is letGo for a caller that holds s.mu. The channel is made
// on first need: most items are never waited for.
func (s *heldSet) letGoLocked(it *item) chan struct{} {
	if it.letGo == nil {
		it.letGo = make(chan struct{})
		if !it.held { // let go already
			close(it.letGo)
		}
	}
	return it.letGo
}

// remove lets go of items.
func (s *heldSet) remove(items []*item) {
	s.mu.Lock()
	for _, it := range items {
		s.removeLocked(it)
	}
	s.mu.Unlock()
	signal(s.freed)
}

// removeLocked lets go of one item: it is no longer held by this process.
// The caller holds s.mu.
func (s *heldSet) removeLocked(it *item) {
	if !it.held {
		return
	}
	it.held = false
	s.count--
	s.tookTurnLocked(it)
	if it.lost {
		s.lostHeld--
	}
	if it.newest {
		// An older item still held (a call still running after its lease
		// was lost) is the newest again: a later claim must wait behind it
		// or be let go, never run beside it.
		it.newest = false
		if o := it.older; o != nil && o.held {
			s.latest[it.event.ID], o.newest = o, true
		} else {
			delete(s.latest, it.event.ID)
		}
	}
	it.older = nil
	if it.letGo != nil {
		close(it.letGo)
	}
	b := it.batch
	if b.remaining--; b.remaining == 0 {
		delete(s.batches, b)
		b.timer.Stop()
		b.cancel(nil)
		if b.cancelTimeout != nil {
			b.cancelTimeout()
		}
	}
	if s.stopping && s.count == 0 {
		close(s.idle)
	}
	signal(s.freed)
}

// stop marks the set stopping, so that no item begins any more, and
// returns a channel closed once no item is held.
func (s *heldSet) stop() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.idle = make(chan struct{})
	if s.count == 0 {
		close(s.idle)
	}
	return s.idle
}

// unstarted lists the held items whose handler never started and whose
// lease is not lost: what a stop releases. Called once stopping, so none
// can start now.
func (s *heldSet) unstarted() []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	var items []*item
	for it := range s.all() {
		if it.state == itemQueued && !it.lost {
			items = append(items, it)
		}
	}
	return items
}

// room is how many items are held, how many of them are suspects that
// have not taken the suspect turn, and whether the set is stopping (then
// nothing may be claimed).
func (s *heldSet) room() (held, suspectsWaiting int, stopping bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count, s.suspectsWaiting, s.stopping
}

// tookTurn notes that a suspect took the suspect turn.
func (s *heldSet) tookTurn(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tookTurnLocked(it)
}

// tookTurnLocked is tookTurn (or the suspect's removal) for a caller that
// holds s.mu.
func (s *heldSet) tookTurnLocked(it *item) {
	if it.awaitsTurn {
		it.awaitsTurn = false
		s.suspectsWaiting--
	}
}

// len is how many items are held.
func (s *heldSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// runningSince reports whether an item's handler has been running since
// cutoff or earlier.
func (s *heldSet) runningSince(cutoff time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for it := range s.all() {
		if it.state == itemRunning && !it.startedAt.After(cutoff) {
			return true
		}
	}
	return false
}

// queueMarks queues for the marker the items still held whose start is
// not marked, signals it, and returns them.
func (s *heldSet) queueMarks(items []*item) (queued []*item) {
	s.mu.Lock()
	for _, it := range items {
		if !it.marked && it.held {
			it.marking = make(chan struct{})
			s.toMark = append(s.toMark, it)
			queued = append(queued, it)
		}
	}
	s.mu.Unlock()
	if len(queued) > 0 {
		signal(s.marksWanted)
	}
	return queued
}

// takeMarks returns the queued items still held, emptying the queue.
func (s *heldSet) takeMarks() []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.toMark
	s.toMark = nil
	kept := items[:0]
	for _, it := range items {
		if it.held {
			kept = append(kept, it)
		}
	}
	return kept
}

// marked applies a start-mark statement: the items in res.Done may start,
// those in res.Busy go back in the queue, and the rest are lost. It
// reports whether any went back in the queue.
func (s *heldSet) marked(items []*item, res lease.RefResult) (again bool) {
	state := make(map[lease.Ref]bool, len(res.Done)+len(res.Busy))
	for _, r := range res.Done {
		state[r] = true
	}
	for _, r := range res.Busy {
		state[r] = false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		if !it.held {
			continue
		}
		done, known := state[it.ref()]
		switch {
		case done:
			it.marked = true
			close(it.marking)
		case known:
			s.toMark = append(s.toMark, it)
			again = true
		default:
			s.loseLocked(it)
		}
	}
	return again
}

// startable returns the items still held whose start is marked (in a new
// slice).
func (s *heldSet) startable(items []*item) []*item {
	return s.keep(items, func(it *item) bool { return it.marked })
}
