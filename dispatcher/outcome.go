package dispatcher

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Outcome is what the database recorded for one attempt at an event, as
// Config.OnOutcome receives it. New fields may be added; none will change
// meaning.
type Outcome struct {
	// Event is the event as the handler received it: Event.Attempt is the
	// number of this attempt, Event.Snoozes the snoozes before it.
	Event outbox.Event
	// Status is where the event went: outbox.StatusSent, outbox.StatusPending
	// (a retry, or a snooze when Snoozed) or outbox.StatusFailed.
	Status outbox.Status
	// Snoozed is true when a handler gave the event back with
	// outbox.Snooze: Status is PENDING, no attempt was spent and Code is
	// empty.
	Snoozed bool
	// Code is the stable reason of a failed attempt (retried or FAILED);
	// empty for SENT and for a snooze.
	Code outbox.Code
	// Err is the handler's or publisher's error (the snooze error for a
	// snooze); nil for SENT. Like every error of the dispatcher, it holds
	// no payload unless the handler put one there.
	Err error
	// NextAttemptAt is when a PENDING event becomes due again, by the
	// database clock; zero for SENT and FAILED.
	NextAttemptAt time.Time
	// QueueWait is how long the event waited from when it became due
	// (next_attempt_at, database clock) until its handler (or publish)
	// started; zero for recovery's worker_lost.
	QueueWait time.Duration
	// RunDuration is how long the handler and publish of this attempt
	// took, until the outcome was handed to the completer; zero for
	// recovery's worker_lost.
	RunDuration time.Duration
}

// outcomeOf is the Outcome of a completed item that reached status.
func outcomeOf(it *held.Item, status outbox.Status) Outcome {
	o := Outcome{
		Event: *it.Event, Status: status, Err: it.Result().Err, Code: it.Result().Code,
		QueueWait:   max(0, it.Waited+it.StartedAt().Sub(it.Batch.ClaimedAt)),
		RunDuration: it.Ran(),
	}
	o.Snoozed = it.Result().Snooze
	return o
}
