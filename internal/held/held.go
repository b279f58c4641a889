package held

import (
	"cmp"
	"context"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Set is the events this process holds: claimed, and not yet let go.
// Every change of an event's state in this process is one of its methods,
// named for the transition (the diagram and the lock order are in the
// package doc). Its lock, mu, is a leaf.
type Set struct {
	// clock: its Now is the local clock of lease deadlines (the
	// dispatcher's Config.now, set by tests); its Mono measures start
	// times, run times and overruns.
	clock clock.Clock
	trust time.Duration // how long a claim or renewal is trusted: 4/5 of LeaseDuration

	// outcomesReady is signalled when an outcome waits for the completer;
	// freed when an event is let go (room for claims).
	outcomesReady chan struct{}
	freed         chan struct{}
	// marksWanted is signalled when items wait for the marker.
	marksWanted chan struct{}

	mu sync.Mutex
	// batches are the claims with an item held, count the items held
	// (their held field is set).
	batches  map[*Batch]struct{}
	count    int
	latest   map[uuid.UUID]*Item // the newest held item of each event id
	outcomes []*Item             // outcomes waiting for the completer
	toMark   []*Item             // items waiting for the marker (see dispatcher/start.go)
	stopping bool                // no handler may start any more
	idle     chan struct{}       // closed when the set empties while stopping

	// inWaves: batches run in waves (Ordering PerKey, see internal/run/ordered.go),
	// each waiting for every call of the one before, suspects included;
	// otherwise a batch's publish waits for its handlers and publishes
	// but not its suspects, and its queued events wait for a slot only.
	// Set before the set is used.
	inWaves bool

	// suspectsWaiting counts the held suspects that have not taken the
	// suspect turn (see internal/run/suspect.go), lostHeld the held items whose lease
	// was lost (see stuck).
	suspectsWaiting, lostHeld int
}

// NewSet returns an empty set whose lease deadlines are on clk's Now, and
// whose start times, run times and overruns are on its Mono.
func NewSet(clk clock.Clock, leaseDuration time.Duration) *Set {
	return &Set{
		clock: clk, trust: leaseDuration - leaseDuration/5,
		outcomesReady: make(chan struct{}, 1), freed: make(chan struct{}, 1), marksWanted: make(chan struct{}, 1),
		batches: make(map[*Batch]struct{}), latest: make(map[uuid.UUID]*Item),
	}
}

// all yields every item held. The caller holds s.mu.
func (s *Set) all() iter.Seq[*Item] {
	return func(yield func(*Item) bool) {
		for b := range s.batches {
			for _, it := range b.items {
				if it.held && !yield(it) {
					return
				}
			}
		}
	}
}

// Batch is the events of one claim: one token, one timer for their
// local deadlines.
type Batch struct {
	token     uuid.UUID
	ClaimedAt time.Time // local time the claim came back
	// Ctx is the claim's context: it ends with Add's parent, or when the
	// set lets go of the batch's last item.
	Ctx       context.Context
	cancel    context.CancelCauseFunc
	items     []*Item
	remaining int         // items still held; guarded by Set.mu
	timer     *time.Timer // fires at the earliest local deadline of its items
	// timeout is the context, under ctx, whose deadline is timeoutAt: the
	// handler timeout of the batch's events that started in the same
	// timeoutGrain. Handlers starting together share its timer;
	// cancelling ctx releases them all. Guarded by Set.mu.
	timeout   context.Context
	timeoutAt time.Time
	// cancelTimeout stops the timer of the latest timeout context. Each is
	// also stopped with ctx, when the batch ends; this only satisfies the
	// rule that no cancel function is dropped.
	cancelTimeout context.CancelFunc
}

// State is where one held event is in its life in this process.
type State uint8

const (
	Queued     State = iota // claimed, handler not started
	Running                 // handler or publisher running
	Finished                // outcome waits for the completer
	Completing              // outcome is being written
)

// Item is one held event. The fields marked "guarded" are guarded by
// Set.mu; the completer's own record is read and written by the
// completer goroutine alone.
//
// A claim holds its items in one allocation, and the per-event work
// touches most of them, so the fields are kept small: the event is the
// claim's own (lease.Batch.Events, which nothing changes after the claim),
// and what only a failed write or an overrun needs is made on first need
// (writes, warn).
type Item struct {
	Event  *outbox.Event // the claim's event; never changed
	Batch  *Batch
	ctx    context.Context // set by begin: the call's context, cancelled when this event's lease is lost
	cancel context.CancelCauseFunc
	// deadline is when this process stops trusting the lease (local
	// clock): set at claim, moved by each renewal of this very (id,
	// token). Guarded.
	deadline time.Time
	// writes is the completer's record of this outcome's failed writes
	// and of the failure it writes (nil until the first of them); the
	// completer's alone.
	writes *WriteRecord
	// marking is closed by the marker once the start is marked (see
	// marked). Guarded.
	marking chan struct{}
	// Key is the order key the claim read (ordered claims only; "" for
	// none, see lease.Batch.Keys). Set before the run of its batch starts.
	Key string
	// Dest is the event's destination (Config.RouteFunc; "" when it is
	// not published), routed once by the run of its batch (internal/run) before anything reads it.
	Dest string
	// Waited is how long the event had been due when the claim took it
	// (database clock).
	Waited time.Duration
	// startedAt is when its handler started, and ran how long until its
	// outcome was handed to the completer; guarded.
	startedAt time.Time
	ran       time.Duration
	letGo     chan struct{}   // closed when the item is let go; made on first need (letGoLocked); guarded
	OlderDone <-chan struct{} // letGo of an older item of the same event, lost but still running, must end first
	// older is the item of the same event that was the newest held when
	// this one was added (nil for none); guarded. When this one is let go
	// first, older becomes the event's newest held item again (see
	// removeLocked), so that a later claim still sees a call that runs.
	older  *Item
	result Result // set when state becomes itemFinished

	// callDeadline is when the running call (phase: its handler, or its
	// publish) passes its timeout; zero for none (NoHandlerTimeout, or
	// waiting for its batch's publish). Past it the heartbeat no longer
	// renews the lease, and the call is an overrun (see overrun.go);
	// warn is when its WARN is due (nil until the first). Guarded.
	callDeadline time.Time
	warn         *overrunWarn
	// gone is closed once rowGone is set, made on first need. Guarded.
	gone chan struct{}

	state State // guarded
	phase Phase // guarded, see callDeadline
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
	// marked: the row shows that this attempt started (see internal/run/slots.go).
	// Guarded.
	marked bool
	// HasSlot: the claim took a handler slot for this item (see
	// internal/run/slots.go, startsFor). Set before the run of its batch starts; read by it only.
	HasSlot bool
	// Suspect: the row was recovered before (see lease.Batch.Suspect);
	// set by add, read only after.
	Suspect bool
	// BehindCall: OlderDone is the end of a call that was still running
	// when this item was claimed. Set by add, read only after.
	BehindCall bool
	// awaitsTurn: a suspect that has not taken the suspect turn yet.
	// Guarded.
	awaitsTurn bool
	// atStop: the stop took the item for release (Unstarted): it is
	// Completing, but its handler never began and it has no outcome.
	// Guarded.
	atStop bool
	// rowGone: the lease was lost and the row no longer shows this
	// attempt (recovery returned it, or a later claim took it), so a
	// suspect's call that still runs no longer needs the suspect turn
	// (see internal/run/suspect.go). Guarded.
	rowGone bool
}

// WriteRecord is the completer's record of the failed writes of one
// outcome: how many, how many the database refused, how many past the
// local deadline, and when to try again; and the failure it writes, as
// it first wrote it (see completer.failureToWrite).
type WriteRecord struct {
	Tries, Refusals, Late int
	// Unsplit counts the refused writes of several that the round's split
	// budget left whole with the item in them (they spend no try).
	Unsplit int
	RetryAt time.Time
	Failure lease.Failure
	Decided bool // failure is set
}

// Record returns the item's write record, made on first need. The
// completer's goroutine only.
func (it *Item) Record() *WriteRecord {
	if it.writes == nil {
		it.writes = new(WriteRecord)
	}
	return it.writes
}

// Refusals is how many times the database refused to record the item's
// outcome.
func (it *Item) Refusals() int {
	if it.writes == nil {
		return 0
	}
	return it.writes.Refusals
}

// Tries is how many writes of the item's outcome failed.
func (it *Item) Tries() int {
	if it.writes == nil {
		return 0
	}
	return it.writes.Tries
}

// RetryAt is when the completer may write the item's outcome again (zero:
// at once).
func (it *Item) RetryAt() time.Time {
	if it.writes == nil {
		return time.Time{}
	}
	return it.writes.RetryAt
}

// overrunWarn is when an overrun's next WARN is due, and the wait after
// that (see Set.Overruns).
type overrunWarn struct {
	next  time.Time
	every time.Duration
}

// Ref is the item's lease: its event id and its claim's token.
func (it *Item) Ref() lease.Ref { return lease.Ref{ID: it.Event.ID, Token: it.Batch.token} }

// deadlineFrom is when this process stops trusting a lease claimed or
// renewed at sentAt: the lease duration less a fifth of it, measured from
// before the statement was sent, so that it passes before the database's
// lease_until does.
func (s *Set) deadlineFrom(sentAt time.Time) time.Time { return sentAt.Add(s.trust) }

// Add holds the events of a claim sent at sentAt, under one batch whose
// context is under parent. The marked events among the first slots get a
// handler slot each (hasSlot); add returns the items and how many slots
// it gave.
func (s *Set) Add(parent context.Context, b lease.Batch, sentAt time.Time, slots int) (items []*Item, given int) {
	hb := &Batch{token: b.Token, ClaimedAt: s.clock.Mono()}
	hb.Ctx, hb.cancel = context.WithCancelCause(parent)
	items = make([]*Item, len(b.Events))
	store := make([]Item, len(b.Events)) // one allocation for the batch
	deadline := s.deadlineFrom(sentAt)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range b.Events {
		e := &b.Events[i]
		it := &store[i] // zeroed: set field by field, not copied whole
		it.Event, it.Batch, it.deadline, it.held, it.newest = e, hb, deadline, true, true
		it.marked, it.Suspect = b.Started[i], i < len(b.Suspect) && b.Suspect[i]
		if it.Suspect {
			it.awaitsTurn = true
			s.suspectsWaiting++
		}
		if i < len(b.Waited) {
			it.Waited = b.Waited[i]
		}
		if i < len(b.Keys) {
			it.Key = b.Keys[i]
		}
		if it.marked && given < slots {
			it.HasSlot = true
			given++
		}
		if prev := s.latest[e.ID]; prev != nil {
			prev.newest = false
			for o := prev; o != nil && o.held; o = o.older {
				if o.state == Running {
					// This claim took the row: the older lease is gone,
					// whatever the heartbeat or the local deadline have
					// seen yet, and its call may never return (see await).
					s.loseLocked(o)
					s.rowGoneLocked(o)
					it.BehindCall = true
				}
			}
			it.older, it.OlderDone = prev, s.letGoLocked(prev)
		}
		items[i] = it
		s.latest[e.ID] = it
	}
	hb.items, hb.remaining = items, len(items)
	s.count += len(items)
	s.batches[hb] = struct{}{}
	hb.timer = s.clock.AfterFunc(s.clock.Until(deadline), func() { s.loseExpired(hb) })
	return items, given
}

// Begin moves a queued item to running and gives it its context, with a
// deadline timeout from now when timeout > 0. It returns false when the
// item may not start: the dispatcher is stopping (the item will be
// released), or the lease is lost or past its local deadline (the item is
// let go as lost). The deadline is read here, on the clock, not left to
// the timer that marks items lost: after a pause of the process the timer
// may not have run yet when the handler would start.
func (s *Set) Begin(it *Item, timeout time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || it.lost || it.state != Queued {
		return false
	}
	// One reading of the clock for both, unless a test replaced Now.
	now, startedAt := s.clock.Read()
	if !now.Before(it.deadline) { // expired
		s.loseLocked(it)
		return false
	}
	it.state = Running
	it.startedAt = startedAt
	parent := it.Batch.Ctx
	if timeout > 0 {
		parent = it.Batch.timeoutContext(it.startedAt.Add(timeout), timeout)
		it.callDeadline, it.phase = it.startedAt.Add(timeout+timeoutGrain(timeout)), PhaseHandler
	}
	it.ctx, it.cancel = context.WithCancelCause(parent)
	return true
}

// timeoutContext returns a context under the batch's whose deadline is at
// or after at, by less than timeoutGrain(timeout): events of one batch
// that start together share one timer instead of arming one each. The
// caller holds Set.mu.
func (b *Batch) timeoutContext(at time.Time, timeout time.Duration) context.Context {
	grain := timeoutGrain(timeout)
	if b.timeout != nil && at.Before(b.timeoutAt) && !at.Before(b.timeoutAt.Add(-grain)) {
		return b.timeout // at's grain is the latest one's (without Truncate, which divides)
	}
	at = at.Truncate(grain).Add(grain)
	if b.timeout == nil || !b.timeoutAt.Equal(at) {
		b.timeout, b.cancelTimeout = context.WithDeadline(b.Ctx, at)
		b.timeoutAt = at
	}
	return b.timeout
}

// timeoutGrain is how much longer than HandlerTimeout a handler may get so
// that handlers can share a timer: a 64th of the timeout, at most 10ms.
func timeoutGrain(timeout time.Duration) time.Duration {
	return max(min(timeout/64, 10*time.Millisecond), time.Microsecond)
}

// LoseIfExpired gives up a started item whose local deadline has passed
// (read on the clock, like Begin), and reports whether the item is lost.
func (s *Set) LoseIfExpired(it *Item) (lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !it.lost && s.expired(it) {
		s.loseLocked(it)
	}
	return it.lost
}

// Finish hands an item's result to the completer. An item whose lease
// was lost meanwhile is let go instead, and finish reports it lost (the
// caller reports outbox.ErrLockLost).
func (s *Set) Finish(it *Item, res Result) (lost bool) {
	s.mu.Lock()
	if it.lost {
		s.removeLocked(it)
		s.mu.Unlock()
		return true
	}
	it.state, it.result = Finished, res
	if it.ran = res.Ran; it.ran == 0 && !it.startedAt.IsZero() {
		it.ran = s.clock.Elapsed(it.startedAt)
	}
	s.outcomes = append(s.outcomes, it)
	s.mu.Unlock()
	signal(s.outcomesReady)
	return false
}

// ReleaseQueued hands the completer, to be released unstarted (no
// attempt spent), those of items still held whose handler never began
// and whose lease is not lost: the rest of a key's run that stopped (see
// internal/run/ordered.go). It returns how many it handed over.
func (s *Set) ReleaseQueued(items []*Item) (n int) {
	return s.GiveBack(items, Result{Release: true})
}

// GiveBack hands the completer res (a release) for those of items still
// held whose handler never began and whose lease is not lost, and returns
// how many it handed over.
func (s *Set) GiveBack(items []*Item, res Result) (n int) {
	s.mu.Lock()
	for _, it := range items {
		if it.held && !it.lost && it.state == Queued {
			it.state, it.result = Finished, res
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

// Outcome returns the result this process gave an item's attempt, and
// false when it gave none: the item never began (a stop took it for
// release, see Unstarted), or its lease was lost.
func (s *Set) Outcome(it *Item) (res Result, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.lost || it.state == Queued || it.state == Running || it.atStop {
		return Result{}, false
	}
	return it.result, true
}

// TakeOutcomes moves up to limit (0: any number) of the outcomes whose
// retry time has come to completing, lets go of those whose lease was
// lost (dropped), and leaves the others waiting. It returns the time until
// the earliest waiting retry is due (0 for none).
func (s *Set) TakeOutcomes(limit int) (items, dropped []*Item, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Mono()
	var later []*Item
	items = make([]*Item, 0, len(s.outcomes)) // most are taken: one allocation
	for _, it := range s.outcomes {
		switch {
		case it.lost:
			s.removeLocked(it)
			dropped = append(dropped, it)
		case it.RetryAt().After(now):
			later = append(later, it)
			if w := it.RetryAt().Sub(now); wait == 0 || w < wait {
				wait = w
			}
		case limit > 0 && len(items) >= limit:
			later = append(later, it) // the next round takes it
		default:
			it.state = Completing
			items = append(items, it)
		}
	}
	s.outcomes = later
	return items, dropped, wait
}

// WriteVerdict is what the completer decides for an outcome whose write
// failed.
type WriteVerdict int

const (
	WriteAgain  WriteVerdict = iota // wait for its retryAt, then write again
	WriteLost                       // the lease can no longer be trusted: let go as lost
	WriteGiveUp                     // failed too often: let go now
)

// WriteFailed puts the outcomes of a failed write back in line or lets
// them go, as judge decides for each item still held (judge is told
// whether the item's local deadline has passed; it runs under the lock,
// so it must only read and update the item). It returns the items given
// up.
func (s *Set) WriteFailed(items []*Item, judge func(it *Item, expired bool) WriteVerdict) (givenUp []*Item) {
	s.mu.Lock()
	for _, it := range items {
		if !it.held {
			continue
		}
		switch judge(it, s.expired(it)) {
		case WriteGiveUp:
			s.removeLocked(it)
			givenUp = append(givenUp, it)
		case WriteLost:
			s.loseLocked(it)
			it.state = Finished
			s.outcomes = append(s.outcomes, it)
		default:
			it.state = Finished
			s.outcomes = append(s.outcomes, it)
		}
	}
	s.mu.Unlock()
	signal(s.outcomesReady)
	return givenUp
}

// MayHaveWritten notes that a write of items may have taken effect
// although it reported an error (its reply was lost, or it timed out):
// the completer, not the heartbeat or the deadline timer, then decides
// their fate (see completerHolds).
func (s *Set) MayHaveWritten(items []*Item) {
	s.mu.Lock()
	for _, it := range items {
		it.maybeWritten = true
	}
	s.mu.Unlock()
}

// Owned returns the items this process still holds (in a new slice).
func (s *Set) Owned(items []*Item) []*Item {
	return s.keep(items, func(*Item) bool { return true })
}

// keep returns the items this process still holds for which ok holds (in
// a new slice); ok runs under s.mu.
func (s *Set) keep(items []*Item, ok func(*Item) bool) []*Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make([]*Item, 0, len(items)) // most are kept: one allocation
	for _, it := range items {
		if it.held && ok(it) {
			kept = append(kept, it)
		}
	}
	return kept
}

// Live lists the held items whose lease is still worth renewing: not
// lost, not a call running past its timeout (see overrun.go), whose
// lease is left to expire so that another replica delivers the event,
// and not an event waiting for its batch's publish behind such a call
// (phaseAwaitPublish), nor under PerKey a queued event of its batch (a
// later wave): they wait for the stuck call, so their turn may never
// come, and renewing them would hold them for ever. Queued ones are let
// go unstarted at their local deadline, uncharged, for any claim.
func (s *Set) Live() []*Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Mono()
	var stalled map[*Batch]bool // batches whose publish waits for a call past its timeout
	for it := range s.all() {
		if overran(it, now) && (!it.Suspect || s.inWaves) {
			if stalled == nil {
				stalled = make(map[*Batch]bool)
			}
			stalled[it.Batch] = true
		}
	}
	items := make([]*Item, 0, s.count)
	for it := range s.all() {
		behindStuck := stalled[it.Batch] && (it.phase == PhaseAwaitPublish && (!it.Suspect || s.inWaves) ||
			s.inWaves && it.state == Queued) // a later wave waits for the stuck one
		if !it.lost && !overran(it, now) && !behindStuck {
			items = append(items, it)
		}
	}
	return items
}

// overran reports whether the item's call is running past its timeout at
// now. The caller holds Set.mu.
func overran(it *Item, now time.Time) bool {
	return it.state == Running && !it.callDeadline.IsZero() && now.After(it.callDeadline)
}

// CallStarts sets the call deadline of started items whose next call (a
// publish, or none: zero) starts now.
func (s *Set) CallStarts(items []*Item, deadline time.Time, phase Phase) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		it.callDeadline, it.phase = deadline, phase
	}
}

// OverrunCall is a call running past its timeout: what its WARN says.
type OverrunCall struct {
	ID            uuid.UUID
	EventType     string
	Phase         string
	Running, Over time.Duration
	First         bool // the first time it is reported
}

// Overrunning counts the calls running past their timeout at now, and
// returns the earliest of their timeouts.
func (s *Set) Overrunning(now time.Time) (n int, oldest time.Time) {
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

// Overruns lists the calls running past their timeout at now whose WARN
// is due (the first at once, then after warnFirst, doubling, up to
// warnMax apart), moving their next WARN on.
func (s *Set) Overruns(now time.Time, warnFirst, warnMax time.Duration) (due []OverrunCall) {
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
		due = append(due, OverrunCall{ID: it.Event.ID, EventType: it.Event.Type, Phase: it.phase.String(),
			Running: now.Sub(it.startedAt), Over: now.Sub(it.callDeadline), First: first})
	}
	return due
}

// Running lists up to limit of the calls running now, oldest first, and
// how many run in all.
func (s *Set) Running(limit int) (calls []RunningCall, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Mono()
	for it := range s.all() {
		if it.state == Running {
			n++
			calls = append(calls, RunningCall{ID: it.Event.ID, Type: it.Event.Type, Running: now.Sub(it.startedAt)})
		}
	}
	slices.SortFunc(calls, func(a, b RunningCall) int { return cmp.Compare(b.Running, a.Running) })
	return calls[:min(len(calls), limit)], n
}

// Stuck lists the events of held items whose lease was lost while their
// call still runs (or its outcome waits to be dropped): a claim leaves
// them out (lease.ClaimParams.Skip), so that another replica takes them
// rather than this one hold them behind that call.
func (s *Set) Stuck() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostHeld == 0 {
		return nil // the common case: no walk of the held set per claim
	}
	var ids []uuid.UUID
	for it := range s.all() {
		if it.lost {
			ids = append(ids, it.Event.ID)
		}
	}
	return ids
}

// StillLive returns the items still held and not lost (in a new slice).
func (s *Set) StillLive(items []*Item) []*Item {
	return s.keep(items, func(it *Item) bool { return !it.lost })
}

// Renewed applies a renewal sent at sentAt: the items in renewed get the
// new local deadline, the items in busy (their rows were locked elsewhere
// at that moment) keep theirs, and the others are lost, unless the
// completer holds their outcome (see completerHolds): a row that no
// longer shows the lease may show the outcome its write recorded.
func (s *Set) Renewed(items []*Item, res lease.RefResult, sentAt time.Time) {
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
		renewed, known := keep[it.Ref()]
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
func (s *Set) loseExpired(b *Batch) {
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
		b.timer.Reset(max(s.clock.Until(next), time.Millisecond))
	}
}

// expired reports whether the item's local deadline has passed. The
// caller holds s.mu.
func (s *Set) expired(it *Item) bool { return !s.clock.Now().Before(it.deadline) }

// completerHolds reports whether the completer decides the fate of an
// item's lease: its outcome is being written, or an earlier write of it
// may have taken effect although its reply was lost (then the row may no
// longer show the lease, and the next try reads what it shows). The
// caller holds Set.mu.
func completerHolds(it *Item) bool { return it.state == Completing || it.maybeWritten }

// loseLocked gives up an item whose lease is gone: its context is
// cancelled, and it is let go at once if it never started. A running item
// is let go when its handler returns; a waiting outcome when the completer
// picks it up. The caller holds s.mu.
func (s *Set) loseLocked(it *Item) {
	if !it.lost && it.held {
		s.lostHeld++
	}
	it.lost = true
	if it.cancel != nil {
		it.cancel(outbox.ErrLockLost)
	}
	if it.state == Queued {
		s.removeLocked(it)
	}
}

// rowGoneLocked notes that the row of a lost item no longer shows its
// attempt. The caller holds s.mu.
func (s *Set) rowGoneLocked(it *Item) {
	if !it.rowGone {
		it.rowGone = true
		if it.gone != nil {
			close(it.gone)
		}
	}
}

// RowGoneSignal returns a channel closed once the item's row no longer
// shows its attempt after its lease was lost (see rowGoneLocked).
func (s *Set) RowGoneSignal(it *Item) <-chan struct{} {
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

// Recovered notes that a recovery returned the rows of ids: the held
// items of those events whose lease was lost no longer show their attempt.
func (s *Set) Recovered(ids ...uuid.UUID) {
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

// LetGo returns a channel that is closed when the item is let go.
func (s *Set) LetGo(it *Item) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.letGoLocked(it)
}

// letGoLocked is letGo for a caller that holds s.mu. The channel is made
// on first need: most items are never waited for.
func (s *Set) letGoLocked(it *Item) chan struct{} {
	if it.letGo == nil {
		it.letGo = make(chan struct{})
		if !it.held { // let go already
			close(it.letGo)
		}
	}
	return it.letGo
}

// Remove lets go of items.
func (s *Set) Remove(items []*Item) {
	s.mu.Lock()
	for _, it := range items {
		s.removeLocked(it)
	}
	s.mu.Unlock()
	signal(s.freed)
}

// removeLocked lets go of one item: it is no longer held by this process.
// The caller holds s.mu.
func (s *Set) removeLocked(it *Item) {
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
			s.latest[it.Event.ID], o.newest = o, true
		} else {
			delete(s.latest, it.Event.ID)
		}
	}
	it.older = nil
	if it.letGo != nil {
		close(it.letGo)
	}
	b := it.Batch
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

// Stop marks the set stopping, so that no item begins any more, and
// returns a channel closed once no item is held.
func (s *Set) Stop() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.idle = make(chan struct{})
	if s.count == 0 {
		close(s.idle)
	}
	return s.idle
}

// Unstarted lists the held items whose handler never started and whose
// lease is not lost, and hands them to the caller, which releases them
// and then removes them (Remove): what a stop releases. They become
// Completing, so nothing else gives them back (ReleaseQueued, an ordered
// run whose chain stopped) or lets them go (a lost lease) while the
// caller's release runs; Outcome reports none for them (they never
// began). Called once stopping, so none can start now.
func (s *Set) Unstarted() []*Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	var items []*Item
	for it := range s.all() {
		if it.state == Queued && !it.lost {
			it.state, it.atStop = Completing, true
			items = append(items, it)
		}
	}
	return items
}

// Room is how many items are held, how many of them are suspects that
// have not taken the suspect turn, and whether the set is stopping (then
// nothing may be claimed).
func (s *Set) Room() (held, suspectsWaiting int, stopping bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count, s.suspectsWaiting, s.stopping
}

// TookTurn notes that a suspect took the suspect turn.
func (s *Set) TookTurn(it *Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tookTurnLocked(it)
}

// tookTurnLocked is tookTurn (or the suspect's removal) for a caller that
// holds s.mu.
func (s *Set) tookTurnLocked(it *Item) {
	if it.awaitsTurn {
		it.awaitsTurn = false
		s.suspectsWaiting--
	}
}

// Len is how many items are held.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// RunningSince reports whether an item's handler has been running since
// cutoff or earlier.
func (s *Set) RunningSince(cutoff time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for it := range s.all() {
		if it.state == Running && !it.startedAt.After(cutoff) {
			return true
		}
	}
	return false
}

// QueueMarks queues for the marker the items still held whose start is
// not marked, signals it, and returns them.
func (s *Set) QueueMarks(items []*Item) (queued []*Item) {
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

// TakeMarks returns the queued items still held, emptying the queue.
func (s *Set) TakeMarks() []*Item {
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

// Marked applies a start-mark statement: the items in res.Done may start,
// those in res.Busy go back in the queue, and the rest are lost. It
// reports whether any went back in the queue.
func (s *Set) Marked(items []*Item, res lease.RefResult) (again bool) {
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
		done, known := state[it.Ref()]
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

// Startable returns the items still held whose start is marked (in a new
// slice).
func (s *Set) Startable(items []*Item) []*Item {
	return s.keep(items, func(it *Item) bool { return it.marked })
}

// Result is the outcome of one attempt.
type Result struct {
	Err        error         // nil on success
	Code       outbox.Code   // reason of a failure; empty for a snooze
	Release    bool          // return unstarted-equivalent work to PENDING
	Unroutable bool          // a release of an event it cannot deliver: due again after a back-off (see internal/run/unroutable.go)
	Snooze     bool          // the handler gave the event back (outbox.Snooze)
	Delay      time.Duration // the snooze's delay
	// ran is how long the handler ran, when it returned (0: not measured,
	// finish measures it).
	Ran time.Duration
}

// Phase is the call an item is in, as an overrun's WARN names it
// (String): none, its handler, its publish, or waiting for its batch's
// publish.
type Phase uint8

// The phases of a call.
const (
	PhaseNone Phase = iota
	PhaseHandler
	PhasePublish
	// phaseAwaitPublish is no call: the handler succeeded and the event
	// waits for its batch's publish, which waits for every handler (and
	// publish) of the batch (under PerKey, of the wave). It has no
	// timeout of its own, and it is renewed unless one of those calls
	// overruns (see heldSet.live).
	PhaseAwaitPublish
)

var phaseNames = [...]string{PhaseNone: "", PhaseHandler: "handler", PhasePublish: "publish",
	PhaseAwaitPublish: "awaiting its batch's publish"}

func (p Phase) String() string { return phaseNames[p] }

// RunningCall is a call still running: the event's id and type, and how
// long it has run (dispatcher.RunningEvent in Health).
type RunningCall struct {
	ID      uuid.UUID
	Type    string
	Running time.Duration
}

// OutcomesReady is signalled when an outcome waits for the completer.
func (s *Set) OutcomesReady() <-chan struct{} { return s.outcomesReady }

// Freed is signalled when an event is let go (room for claims).
func (s *Set) Freed() <-chan struct{} { return s.freed }

// MarksWanted is signalled when items wait for the marker.
func (s *Set) MarksWanted() <-chan struct{} { return s.marksWanted }

// RunInWaves makes the set treat batches as run in waves (Ordering
// PerKey, see inWaves). Call it before the set is used.
func (s *Set) RunInWaves() { s.inWaves = true }

// signal wakes ch's reader without blocking: a signal already pending
// stands for this one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// The accessors below read fields that the set writes under its lock
// without taking it: each names who may call it, and when, so that the
// set's lock (or the goroutine's own order) has ordered the write before.

// Context is the call's context, cancelled when the event's lease is
// lost; set by Begin, read by the goroutine that began the item.
func (it *Item) Context() context.Context { return it.ctx }

// Cancel ends the call's context with cause; for the goroutine that
// began the item, once its call returned.
func (it *Item) Cancel(cause error) { it.cancel(cause) }

// StartedAt is when the item's handler started (set by Begin); read by
// the goroutine that began it, or once its outcome is handed over.
func (it *Item) StartedAt() time.Time { return it.startedAt }

// Ran is how long the handler ran until its outcome was handed to the
// completer (set by Finish); read once the outcome is taken.
func (it *Item) Ran() time.Duration { return it.ran }

// Result is the result handed to the completer (set by Finish or
// GiveBack); read by the completer once TakeOutcomes handed it the item.
func (it *Item) Result() Result { return it.result }

// MaybeWritten reports whether a write of this outcome reported an error
// but may have taken effect. The completer's goroutine only (it alone
// writes it, through MayHaveWritten), or a judge of WriteFailed.
func (it *Item) MaybeWritten() bool { return it.maybeWritten }

// Marked reports whether the row shows that this attempt started. It is
// read without the lock: it is set before the claim's items are run (by
// Add) or by Marked after QueueMarks queued the item, never while the
// goroutine running the item reads it.
func (it *Item) Marked() bool { return it.marked }

// Marking is closed once the start of an item QueueMarks returned is
// marked; for the caller of QueueMarks.
func (it *Item) Marking() <-chan struct{} { return it.marking }

// Waiting is how many outcomes wait for the completer.
func (s *Set) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outcomes)
}

// Lease returns the item's local deadline and whether its lease is lost,
// read under the lock.
func (s *Set) Lease(it *Item) (deadline time.Time, lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return it.deadline, it.lost
}
