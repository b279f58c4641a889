package lanes

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// CodeKeyParked is the code of an event parked without being published
// itself: its key was parked already, or an earlier event of its key in
// the batch was parked.
const CodeKeyParked outbox.Code = "key_parked"

// PublishError is a message's failure that cost something: a retry
// scheduled, or its key parked. Its text holds no payload (the
// publisher's error text is the publisher's promise).
type PublishError struct {
	// Seq and ID are the event's log seq and event id.
	Seq int64
	ID  uuid.UUID
	// Code is what the group records if the event is parked:
	// publish_error, invalid_event, timeout (the call's PublishTimeout ran
	// out) or panic.
	Code outbox.Code
	// Attempt counts the event's failed attempts in this batch, this one
	// included.
	Attempt int
	// Parked says the event and its key were parked; else it is retried.
	Parked bool
	// Err is the publisher's error.
	Err error
}

// Error implements error.
func (e *PublishError) Error() string {
	what := "retried"
	if e.Parked {
		what = "parked"
	}
	return errtext.Prefix + "publish event " + e.ID.String() + " (seq " + strconv.FormatInt(e.Seq, 10) + "), attempt " +
		strconv.Itoa(e.Attempt) + ", " + what + ": " + errtext.Trim(e.Err.Error())
}

// Unwrap returns the publisher's error.
func (e *PublishError) Unwrap() error { return e.Err }

// reason is the text recorded with a parked event.
func (e *PublishError) reason() string {
	if outbox.IsPermanent(e.Err) {
		return e.Err.Error()
	}
	return "retries spent after " + strconv.Itoa(e.Attempt) + " attempts: " + e.Err.Error()
}

// panicError is the error of every message of a call whose publisher
// panicked.
type panicError struct{ value any }

func (p *panicError) Error() string { return fmt.Sprintf("pgoutbox: publisher panic: %v", p.value) }

// call is Publisher.Publish, with a panic or a result count that breaks
// the contract turned into an error for every message.
func (l *Lanes) call(ctx context.Context, msgs []outbox.Message) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			errs = fill(len(msgs), &panicError{value: p})
		}
	}()
	errs = l.cfg.Publisher.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		errs = fill(len(msgs), fmt.Errorf("pgoutbox: the publisher returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// codeOf is the code of a failed message, as the dispatcher's: timeout
// when the call's timeout ended it, panic, invalid_event when the
// publisher cannot carry the event, else publish_error.
func codeOf(err error, timedOut bool) outbox.Code {
	var p *panicError
	switch {
	case errors.As(err, &p):
		return outbox.CodePanic
	case timedOut:
		return outbox.CodeTimeout
	case errors.Is(err, outbox.ErrInvalidEvent):
		return outbox.CodeInvalidEvent
	}
	return outbox.CodePublishError
}

// parkedEvent is e parked under key, with its reason cleaned to be stored
// as it is (lease.CleanMessage: valid UTF-8, no NUL, 2048 bytes at most).
func parkedEvent(e *batch.Event, key string, code outbox.Code, reason string) batch.Parked {
	return batch.Parked{Event: *e, Key: key, Code: string(code), Err: lease.CleanMessage(reason)}
}
