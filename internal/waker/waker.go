package waker

import "time"

// Waker decides when wake-ups (notifications and Trigger) start claims.
// Only the coordinator goroutine calls it, with the time and whether a
// claim is in flight; it arms its timer through Config.ArmFunc.
//
// While the dispatcher is quiet (the claims of the last WakeupCooldown
// found fewer than busyAt events), a wake-up claims at once, and wake-ups
// that arrive while a claim is in flight cause exactly one more claim when
// it ends: nothing waits out a cooldown. Follow-up claims then run every
// followEvery (a fifth of WakeupCooldown) until one has started
// WakeupCooldown after the last wake-up: an emitter sends no notify for
// events emitted within its NotifyInterval (by default also 20ms) of one
// that did, and these claims find them soon after their commits.
//
// While the dispatcher is busy (busyAt events or more in the last
// WakeupCooldown: 2,500 events/s at the defaults), claims started by
// wake-ups are WakeupCooldown apart, and the wake-ups in between coalesce
// into the claim at its end, so that each claim takes many events.
type Waker struct {
	cooldown time.Duration // 0: NoWakeupCooldown, a claim per wake-up
	busyAt   int
	arm      func(time.Duration) // (re)arms the timer that calls Fired
	over     func()              // Config.FollowUpsOver (tests), or nil

	last    time.Time // when the last claim the waker asked for started
	hot     time.Time // the last wake-up
	next    time.Time // when the armed timer fires; zero when none is armed
	pending bool      // a claim is owed once no claim is in flight
	found   []foundAt // claims of the last cooldown that found events
	sum     int       // events in found
}

// foundAt is one claim's count of events and when it ended.
type foundAt struct {
	at time.Time
	n  int
}

// Config is what a Waker needs from the dispatcher's configuration.
type Config struct {
	// Cooldown is the dispatcher's WakeupCooldown; 0 (NoWakeupCooldown)
	// makes every wake-up claim.
	Cooldown time.Duration
	// BatchSize is the dispatcher's BatchSize: the dispatcher is busy from
	// half of it found within a cooldown.
	BatchSize int
	// ArmFunc (re)arms the timer whose firing the coordinator passes to
	// Fired, to fire after the given duration.
	ArmFunc func(time.Duration)
	// FollowUpsOver, when set, is called when the waker starts a claim and
	// arms no follow-up after it (a test signal).
	FollowUpsOver func()
}

// New returns a Waker for cfg, quiet and with no timer armed.
func New(cfg Config) *Waker {
	return &Waker{cooldown: cfg.Cooldown, busyAt: max(1, cfg.BatchSize/2), arm: cfg.ArmFunc, over: cfg.FollowUpsOver}
}

// followEvery is the time between follow-up claims while the dispatcher is
// quiet.
func (w *Waker) followEvery() time.Duration { return w.cooldown / 5 }

// Wakeup takes a wake-up at now and reports whether to claim now.
func (w *Waker) Wakeup(now time.Time, inflight bool) bool {
	if w.cooldown == 0 {
		return true
	}
	w.hot = now
	return w.due(now, inflight, w.gap(now))
}

// Fired takes the timer's firing and reports whether to claim now.
func (w *Waker) Fired(now time.Time, inflight bool) bool {
	if w.next.IsZero() || now.Before(w.next) {
		return false // a stale firing of a timer re-armed since
	}
	w.next = time.Time{}
	return w.due(now, inflight, 0)
}

// Finished takes the end of a claim that found got events and reports
// whether to claim now: the one claim owed to wake-ups that arrived while
// claims were in flight, once none is.
func (w *Waker) Finished(now time.Time, got int, inflight bool) bool {
	if got > 0 && w.cooldown > 0 {
		w.found = append(w.found, foundAt{at: now, n: got})
		w.sum += got
		w.busy(now) // prune: without wake-ups nothing else would
	}
	if !w.pending || inflight {
		return false
	}
	w.pending = false
	return w.due(now, false, w.gap(now))
}

// due claims now when no claim is in flight and the last began at least
// gap ago; otherwise it owes one claim, when the claims in flight end or
// when gap has passed.
func (w *Waker) due(now time.Time, inflight bool, gap time.Duration) bool {
	if inflight {
		w.pending = true
		return false
	}
	if at := w.last.Add(gap); now.Before(at) {
		w.schedule(now, at)
		return false
	}
	w.last = now
	w.follow(now)
	return true
}

// follow arms the next follow-up claim, until one has started
// WakeupCooldown after the last wake-up.
func (w *Waker) follow(now time.Time) {
	if !w.last.Before(w.hot.Add(w.cooldown)) {
		if w.over != nil {
			w.over()
		}
		return
	}
	gap := w.gap(now)
	if gap == 0 {
		gap = w.followEvery()
	}
	w.schedule(now, now.Add(gap))
}

// schedule arms the timer to fire at at.
func (w *Waker) schedule(now, at time.Time) {
	w.next = at
	w.arm(at.Sub(now))
}

// gap is the least time between two claims started by wake-ups: none
// while the dispatcher is quiet, WakeupCooldown while it is busy.
func (w *Waker) gap(now time.Time) time.Duration {
	if w.busy(now) {
		return w.cooldown
	}
	return 0
}

// busy reports whether the claims that ended within the last
// WakeupCooldown found busyAt events or more.
func (w *Waker) busy(now time.Time) bool {
	cut := now.Add(-w.cooldown)
	i := 0
	for i < len(w.found) && !w.found[i].at.After(cut) {
		w.sum -= w.found[i].n
		i++
	}
	w.found = w.found[i:]
	return w.sum >= w.busyAt
}
