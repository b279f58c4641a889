package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors, for callers that branch with errors.Is. Every typed error
// in this package unwraps to one of them.
var (
	// ErrInvalidEvent is the root of every event validation failure. When
	// Emit returns it, nothing was written and the transaction is still
	// usable; when a publisher does, it cannot carry the event as it is
	// (see the header rule in the package documentation).
	ErrInvalidEvent = errors.New("pgoutbox: invalid event")
	// ErrInvalidConfig is the root of every configuration error.
	ErrInvalidConfig = errors.New("pgoutbox: invalid configuration")
	// ErrInvalidIdentifier is returned for a schema or table name that is not
	// a plain lowercase SQL identifier of at most 63 bytes.
	ErrInvalidIdentifier = errors.New("pgoutbox: invalid identifier")
	// ErrTxDone is returned when Emit is given a nil or finished transaction.
	ErrTxDone = errors.New("pgoutbox: transaction is nil or already finished")
	// ErrSchemaMismatch is the root of the error Verify returns when the
	// database does not hold the objects the library relies on.
	ErrSchemaMismatch = errors.New("pgoutbox: schema does not match")
	// ErrLockLost is reported when a worker tries to complete or renew an
	// event whose lease it no longer holds (expired, recovered, or taken by
	// another worker). The row was not changed.
	ErrLockLost = errors.New("pgoutbox: lease lost")
	// ErrOutcomeUnknown is reported when a completion whose reply was lost
	// (a timeout, a broken connection) is retried and the row no longer
	// shows whether the first write took effect: with DeleteSent, a row
	// that is gone was most likely deleted by that write, but nothing
	// proves it. No outcome hook fires for it.
	ErrOutcomeUnknown = errors.New("pgoutbox: outcome unknown")
	// ErrOutcomeRefused is reported when the database kept refusing the
	// write of one event's outcome (a user trigger or constraint, a
	// missing privilege): the dispatcher let go of the event, whose lease
	// then expires and is recovered.
	ErrOutcomeRefused = errors.New("pgoutbox: outcome refused by the database")
)

// ValidationError says which event of a call and which of its fields is
// invalid. Its text never contains payload bytes or header values.
type ValidationError struct {
	// Index is the position of the event in the Emit call, or -1 when the
	// error is not about one event (for example a nil transaction).
	Index int
	// Field is the Event field at fault, e.g. "Type" or "Headers".
	Field string
	// Reason says what is wrong, in a few words.
	Reason string
	// Err is an underlying cause, if any.
	Err error
}

// Error implements error.
func (e *ValidationError) Error() string {
	msg := fmt.Sprintf("pgoutbox: invalid event %d: %s %s", e.Index, e.Field, e.Reason)
	if e.Index < 0 {
		msg = fmt.Sprintf("pgoutbox: invalid event: %s %s", e.Field, e.Reason)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrInvalidEvent and the underlying cause.
func (e *ValidationError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidEvent, e.Err}
	}
	return []error{ErrInvalidEvent}
}

// ConfigError names the configuration option whose value is out of range.
type ConfigError struct {
	// Option is the name of the Config field, e.g. "BatchSize".
	Option string
	// Reason says what range or form is expected.
	Reason string
	// Err is an underlying cause, if any (for example ErrInvalidIdentifier
	// for a bad table name).
	Err error
}

// Error implements error.
func (e *ConfigError) Error() string {
	msg := fmt.Sprintf("pgoutbox: invalid configuration: %s %s", e.Option, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrInvalidConfig and the underlying cause.
func (e *ConfigError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidConfig, e.Err}
	}
	return []error{ErrInvalidConfig}
}
