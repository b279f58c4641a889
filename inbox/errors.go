package inbox

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Sentinel errors, for callers that branch with errors.Is.
var (
	// ErrInvalidInput is the root of every [*InputError]: a call was given
	// an argument it cannot use. Nothing was written when it is returned.
	ErrInvalidInput = errors.New("pgoutbox: inbox: invalid input")
	// ErrContentMismatch is the root of every [*ConflictError]: the event ID
	// was already recorded for the consumer with a different type or
	// payload.
	ErrContentMismatch = errors.New("pgoutbox: inbox: event ID reused with different content")
)

// InputError names the argument of a call that is invalid. Its text never
// contains payload bytes; a consumer name that is not valid UTF-8 or too long
// is not quoted either.
type InputError struct {
	// Arg is the argument at fault: "tx", "consumer", "event.ID", "work",
	// "db", "olderThan" or "batchSize".
	Arg string
	// Reason says what is wrong, in a few words.
	Reason string
	// Err is an underlying cause, if any (outbox.ErrTxDone for a nil tx).
	Err error
}

// Error implements error.
func (e *InputError) Error() string {
	msg := fmt.Sprintf("pgoutbox: inbox: invalid input: %s %s", e.Arg, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrInvalidInput and the underlying cause.
func (e *InputError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidInput, e.Err}
	}
	return []error{ErrInvalidInput}
}

// ConflictError reports that an event ID was already recorded for a
// consumer with different content (type or payload). The consumer's work was
// not run. It names the consumer and event but carries neither payload nor
// hash.
type ConflictError struct {
	// Consumer is the consumer name the event was processed under.
	Consumer string
	// EventID is the reused event ID.
	EventID uuid.UUID
}

// Error implements error.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("pgoutbox: inbox: event %s was already processed by consumer %q with different content", e.EventID, e.Consumer)
}

// Unwrap returns ErrContentMismatch.
func (e *ConflictError) Unwrap() error { return ErrContentMismatch }
