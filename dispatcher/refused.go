package dispatcher

import (
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// recordRefused records an event whose outcome the database refused
// maxRefusals times as FAILED with code outcome_refused, in a write that
// can succeed where the outcome's did not (see lease.Store.Refused), and
// reports it. It reports whether it did; when it did not (a release, which
// ran nothing; or this write failed too, or the lease is gone), the event
// is let go as before and its lease expires for recovery. Letting a
// refused outcome expire ran the event again (DeleteSent without the
// DELETE privilege: up to three times in 12s), ending FAILED with a
// misleading worker_lost.
func (c *completer) recordRefused(it *held.Item, err error) bool {
	if it.Result().Release || it.Refusals() < maxRefusals {
		return false
	}
	ctx, cancel := c.opContext()
	defer cancel()
	msg := fmt.Sprintf("the database refused to record %s %d times: %v", c.outcomeName(it), it.Refusals(), report.ErrorText(err))
	ok, werr := c.store.Refused(ctx, c.pool, it.Ref(), msg)
	if werr != nil || !ok {
		return false
	}
	o := outcomeOf(it, outbox.StatusFailed)
	o.Code, o.Err = outbox.CodeOutcomeRefused, errtext.WrapAs(outbox.ErrOutcomeRefused, err, "event %s", it.Event.ID)
	c.report.Refused(it.Event, c.outcomeName(it), it.Refusals(), err, o.Err)
	if c.cfg.OnOutcome != nil {
		c.cfg.OnOutcome(c.ctx, o)
	}
	return true
}

// outcomeName says which outcome of it was refused, for the row's
// last_error and the log.
func (c *completer) outcomeName(it *held.Item) string {
	switch {
	case it.Result().Err == nil && c.cfg.DeleteSent:
		return "SENT (a DELETE, DeleteSent)"
	case it.Result().Err == nil:
		return "SENT"
	case it.Result().Snooze:
		return "a snooze"
	}
	return "a failure (" + string(it.Result().Code) + ")"
}
