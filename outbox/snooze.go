package outbox

import (
	"errors"
	"fmt"
	"time"
)

// MaxSnoozeDelay is the longest delay [Snooze] accepts: one year. A longer
// delay is almost certainly a unit mistake (seconds passed as a
// time.Duration count, a timestamp passed as a delay), and an event
// parked for longer than a year is better dead-lettered where an operator
// sees it.
const MaxSnoozeDelay = 365 * 24 * time.Hour

// snoozeError is the error [Snooze] returns; its delay is between 0 and
// MaxSnoozeDelay.
type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return "pgoutbox: snoozed for " + e.delay.String() }

// Snooze returns the error a handler returns to give its event back
// without spending an attempt: the dispatcher returns the event to
// PENDING, due at the database's now() + d, with its attempts unchanged
// and its snoozes counter one higher. A snooze of 0 makes it due at once,
// behind the events already due. The dispatcher bounds how often one
// event may snooze (dispatcher.Config.MaxSnoozes); the snooze past the
// bound makes the event FAILED with [CodeSnoozeLimit].
//
// Return it as is or wrapped (fmt.Errorf("waiting for the bank: %w",
// Snooze(d))). Only a handler's error snoozes: a publisher's is an
// ordinary failure, and [Permanent] wins over a Snooze it wraps.
//
// For d below 0 or above [MaxSnoozeDelay], Snooze returns an ordinary
// error saying so instead, which the dispatcher records as a failed
// attempt (handler_error), retried on the backoff like any other.
func Snooze(d time.Duration) error {
	if d < 0 || d > MaxSnoozeDelay {
		return fmt.Errorf("pgoutbox: invalid snooze of %s: the delay must be between 0 and %s", d, MaxSnoozeDelay)
	}
	return &snoozeError{delay: d}
}

// SnoozeDelay reports whether err, or any error it wraps, was made by
// [Snooze], and the delay it asked for.
func SnoozeDelay(err error) (time.Duration, bool) {
	var s *snoozeError
	if !errors.As(err, &s) {
		return 0, false
	}
	return s.delay, true
}
