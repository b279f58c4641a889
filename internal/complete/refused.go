package complete

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
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
func (c *Completer) recordRefused(it *held.Item, err error) bool {
	if it.Result().Release || it.Refusals() < maxRefusals {
		return false
	}
	ctx, cancel := c.opContext()
	defer cancel()
	msg := fmt.Sprintf("the database refused to record %s %d times: %v", c.outcomeName(it), it.Refusals(), report.ErrorText(err))
	ok, werr := c.cfg.Store.Refused(ctx, c.cfg.Pool, it.Ref(), msg)
	if werr != nil || !ok {
		return false
	}
	o := outcomeOf(it, outbox.StatusFailed)
	o.Code, o.Err = outbox.CodeOutcomeRefused, errtext.WrapAs(outbox.ErrOutcomeRefused, err, "event %s", it.Event.ID)
	c.cfg.Report.Refused(it.Event, c.outcomeName(it), it.Refusals(), err, o.Err)
	c.tell(o)
	return true
}

// outcomeName says which outcome of it was refused, for the row's
// last_error and the log.
func (c *Completer) outcomeName(it *held.Item) string {
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

// Refused reports whether err is the database refusing a statement (an
// SQL error that the same statement would meet again), rather than a
// failure that says nothing about the statement: a lost or broken
// connection, a timeout or cancellation, a deadlock or serialization
// failure, lack of resources, a shutdown, or a read-only server.
//
// A check violation without a constraint is PostgreSQL finding no
// partition of the SENT history for a row (its default partition
// dropped, no time partition created yet): the retention pass creates
// the partition, after which the same move succeeds, so it is no
// refusal. Counted as one, it would end in Refused, which makes a
// delivered event a dead letter that a replay delivers again.
func Refused(err error) bool {
	code := pgerr.Code(err)
	if len(code) < 2 || noPartition(err) {
		return false
	}
	switch code[:2] {
	case "08", "25", "40", "53", "55", "57", "58":
		return false
	}
	return true
}

// noPartition reports whether err is PostgreSQL finding no partition
// for a row (check_violation naming no constraint).
func noPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == ""
}

// unsent reports whether err shows that a write never reached the
// database (no connection could be made, or pgx sent nothing), so that it
// cannot have taken effect.
func unsent(err error) bool {
	var connectErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &connectErr)
}
