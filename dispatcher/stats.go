package dispatcher

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/report"
)

// Stats is a point-in-time snapshot of a dispatcher's counters and gauges.
// It holds numbers only, and event types in WaitingUnhandledByType and
// UnroutableByType: no payloads or IDs.
type Stats struct {
	// Claimed counts events claimed since New.
	Claimed uint64
	// Sent counts events that became SENT (or were deleted on success).
	Sent uint64
	// Retried counts failed attempts that were scheduled for retry.
	Retried uint64
	// Snoozed counts attempts whose handler gave the event back with
	// outbox.Snooze (PENDING again, no attempt spent).
	Snoozed uint64
	// Failed counts events that became FAILED through this dispatcher's
	// completions (not through recovery; see RecoveredFailed).
	Failed uint64
	// LockLost counts outcomes that could not be recorded because the
	// lease had been lost.
	LockLost uint64
	// OutcomeUnknown counts outcomes whose write may have taken effect
	// although its reply was lost, and whose row no longer shows whether
	// it did (deleted, or a later outcome of another replica replaced a
	// snooze's trace), or could not be read again before the lease's
	// local deadline (errors.Is(err, outbox.ErrOutcomeUnknown)).
	OutcomeUnknown uint64
	// Recovered counts expired leases this dispatcher returned to PENDING.
	Recovered uint64
	// RecoveredFailed counts expired leases this dispatcher turned into
	// FAILED with worker_lost.
	RecoveredFailed uint64
	// Released counts claimed events returned unstarted to PENDING: at
	// stop, and suspects that waited LeaseDuration for their turn (see
	// docs/guarantees.md), and events it could not route (Unroutable);
	// and the events of OutageReturned once their return is written.
	Released uint64
	// OutageReturned counts events returned to PENDING without spending
	// an attempt because the publisher reported its destination
	// unavailable (see Circuit).
	OutageReturned uint64
	// CircuitOpens counts the times the publisher's circuit opened from
	// closed (a failed probe that opens it again is not counted).
	CircuitOpens uint64
	// Circuit is the state of the publisher's circuit now: CircuitOpen
	// or CircuitProbing while the publisher's destination is unavailable
	// (see docs/dispatcher.md, "Outages").
	Circuit CircuitState
	// OrderReleased counts events that an ordered dispatcher (Ordering
	// PerKey) returned unstarted to PENDING, uncharged, because an earlier
	// event of their key in the same claim did not succeed (a retry, a
	// snooze, a lost lease, or a FAILED event under BlockKey), or because
	// a KeyOrderedPublisher did not attempt them (outbox.ErrNotAttempted).
	// They are counted in Released too once their release is written.
	OrderReleased uint64
	// Overruns counts handler and publish calls found running past their
	// timeout (HandlerTimeout, PublishTimeout): calls that ignore their
	// cancelled context. Each is logged at WARN, and its lease is no
	// longer renewed, so that another replica delivers its event (see
	// docs/dispatcher.md, "Handlers that ignore their context"). Metered
	// as pgoutbox.events.overrun.
	Overruns uint64
	// Overrunning is how many of those calls are running now, each past
	// its timeout (see Health.Overrunning).
	Overrunning int
	// RetentionSent counts SENT rows this dispatcher's retention job
	// retired (older than RetainSent): the rows of the history partitions
	// it dropped (counted for a partition of up to 8 MB, the planner's
	// estimate, pg_class.reltuples, for a larger one) and those it deleted
	// from the default partition.
	RetentionSent uint64
	// RetentionFailed counts FAILED rows this dispatcher's retention job
	// deleted (older than RetainFailed).
	RetentionFailed uint64
	// RetentionPasses counts retention passes this dispatcher started.
	RetentionPasses uint64
	// RetentionSkipped counts retention passes this dispatcher ended early
	// because another replica was deleting (its turn, not an error).
	RetentionSkipped uint64
	// Errors counts internal errors passed to OnError, lock losses
	// included.
	Errors uint64
	// PollCycles counts poll-ticker cycles.
	PollCycles uint64
	// ClaimCycles counts claim statements issued, whatever woke them.
	ClaimCycles uint64
	// Wakeups counts notifications received on the wake-up channel.
	Wakeups uint64
	// ListenerConnects counts (re)connections of the listener.
	ListenerConnects uint64
	// DueWakeups counts claim cycles run because a retry became due while
	// the poll interval was stretched.
	DueWakeups uint64
	// PollInterval is the current interval between polls: PollInterval,
	// or more while it is stretched (idle, wake-ups working, and
	// IdlePollInterval set above PollInterval).
	PollInterval time.Duration
	// WakeupsActive is true while the listener is connected and listening.
	WakeupsActive bool
	// InFlight is the number of events held right now (claimed and not yet
	// completed, released or lost).
	InFlight int
	// LastPoll is the local time of the latest poll cycle; zero before the
	// first.
	LastPoll time.Time
	// WaitingUnhandled is how many PENDING events of types this
	// dispatcher does not claim (see ClaimedTypes) have been due for more
	// than a minute (or two IdlePollIntervals, if longer): events that no
	// running dispatcher may be able to deliver. Counted every
	// RecoverEvery-th poll, up to 1,000 per type; always 0 for a
	// dispatcher that claims every type.
	WaitingUnhandled int64
	// ModeConflicts is how many other dispatchers of this table are heard
	// with another ordering mode right now (see Health.ModeConflicts).
	ModeConflicts int
	// Hellos counts the hellos heard from other dispatchers of this
	// table: each says hello on the wake-up channel every third of its
	// LeaseDuration (see docs/ordering.md, "Mixed modes"); 0 without a
	// working listener.
	Hellos uint64
	// WaitingUnhandledByType breaks WaitingUnhandled down by event type
	// (up to 1,000 each); nil when nothing waits. A copy: the caller may
	// keep it.
	WaitingUnhandledByType map[string]int64
	// Unroutable counts events this dispatcher claimed and could not
	// deliver: RouteFunc gave them no destination and no handler is
	// registered for their type (a Publisher without PublishTypes claims
	// every type). Each was released unstarted and uncharged, PENDING
	// again after a short back-off, for a replica that routes it (see
	// docs/dispatcher.md, "Which events it claims"); never dead-lettered.
	// An event released again after its back-off is counted again. They
	// are counted in Released too once their release is written. The
	// sibling of WaitingUnhandled for a dispatcher that claims every type.
	Unroutable uint64
	// UnroutableByType breaks Unroutable down by event type (up to 1,000
	// types); nil when there was none. A copy: the caller may keep it.
	UnroutableByType map[string]uint64
}

// statsOf is the snapshot of the counters c, with inFlight events held.
func statsOf(c *report.Counters, inFlight int) Stats {
	s := Stats{
		Claimed: c.Claimed.Load(), Sent: c.Sent.Load(), Retried: c.Retried.Load(), Snoozed: c.Snoozed.Load(),
		Failed: c.Failed.Load(), LockLost: c.LockLost.Load(), OutcomeUnknown: c.OutcomeUnknown.Load(), Recovered: c.Recovered.Load(),
		RecoveredFailed: c.RecoveredFailed.Load(), Released: c.Released.Load(), OrderReleased: c.OrderReleased.Load(),
		Errors: c.Errors.Load(), PollCycles: c.PollCycles.Load(), ClaimCycles: c.ClaimCycles.Load(),
		Wakeups: c.Wakeups.Load(), ListenerConnects: c.ListenerConnects.Load(), DueWakeups: c.DueWakeups.Load(),
		RetentionSent: c.RetentionSent.Load(), RetentionFailed: c.RetentionFailed.Load(),
		RetentionPasses: c.RetentionPasses.Load(), RetentionSkipped: c.RetentionSkipped.Load(),
		CircuitOpens: c.CircuitOpens.Load(), OutageReturned: c.OutageReturned.Load(), Overruns: c.Overruns.Load(),
		Unroutable: c.Unroutable.Load(),
		InFlight:   inFlight, PollInterval: time.Duration(c.PollInterval.Load()),
	}
	if ns := c.LastPoll.Load(); ns != 0 {
		s.LastPoll = time.Unix(0, ns)
	}
	return s
}
