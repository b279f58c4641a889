package complete

import (
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Outcome is what the database recorded for one held item, as OutcomeFunc
// receives it; the dispatcher makes its public Outcome of it.
type Outcome struct {
	// Item is the held item whose outcome was recorded (its event, its
	// result, its times).
	Item *held.Item
	// Status is where the event went: SENT, PENDING (a retry or a
	// snooze) or FAILED.
	Status outbox.Status
	// Code and Err are the item's result's, except for an outcome the
	// database kept refusing: outbox.CodeOutcomeRefused and an error
	// matching outbox.ErrOutcomeRefused.
	Code outbox.Code
	Err  error
	// NextAttemptAt is when a PENDING event becomes due again (database
	// clock); zero otherwise.
	NextAttemptAt time.Time
}

// outcomeOf is the Outcome of it that reached status, with its result's
// code and error.
func outcomeOf(it *held.Item, status outbox.Status) Outcome {
	return Outcome{Item: it, Status: status, Code: it.Result().Code, Err: it.Result().Err}
}

// tell passes o to OutcomeFunc, if any, under the completer's context.
func (c *Completer) tell(o Outcome) {
	if c.cfg.OutcomeFunc != nil {
		c.cfg.OutcomeFunc(c.cfg.Ctx, o)
	}
}

// reportGivenUp reports an event whose outcome the completer gave up
// writing: matching outbox.ErrOutcomeRefused when the database kept
// refusing it, outbox.ErrOutcomeUnknown when an earlier write of it may
// have taken effect, else outbox.ErrLockLost (the row was not changed).
// Its lease expires and recovery returns it to PENDING.
func (c *Completer) reportGivenUp(it *held.Item, err error) {
	cause := outbox.ErrLockLost
	switch {
	case it.Refusals() >= maxRefusals:
		cause = outbox.ErrOutcomeRefused
	case it.MaybeWritten():
		cause = outbox.ErrOutcomeUnknown
	}
	c.cfg.Report.GivenUp(it.Event, it.Tries(), it.Refusals(), cause, err)
}

// reportOutcomes counts the outcomes of a completion and passes them to
// OutcomeFunc.
func (c *Completer) reportOutcomes(byID map[uuid.UUID]*held.Item, res lease.CompleteResult) {
	r := c.cfg.Report
	for _, id := range res.Sent {
		r.Counters.Sent.Add(1)
		it := byID[id]
		r.Metrics().Completed(it.Event.Type, outbox.StatusSent, it.Result().Snooze, it.Result().Code)
		c.tell(outcomeOf(it, outbox.StatusSent))
	}
	for _, ret := range res.Retried {
		it := byID[ret.ID]
		o := outcomeOf(it, outbox.StatusPending)
		o.NextAttemptAt = ret.NextAttemptAt
		if it.Result().Snooze {
			r.Counters.Snoozed.Add(1)
		} else {
			r.Counters.Retried.Add(1)
		}
		r.Retry(it.Event, o.Code, o.NextAttemptAt, o.Err, it.Result().Snooze)
		r.Metrics().Completed(it.Event.Type, outbox.StatusPending, it.Result().Snooze, it.Result().Code)
		c.tell(o)
	}
	for _, f := range res.Failed {
		r.Counters.Failed.Add(1)
		o := outcomeOf(byID[f.ID], outbox.StatusFailed)
		r.Failed(o.Item.Event, o.Code, o.Err) // the dead letter
		c.tell(o)
	}
}
