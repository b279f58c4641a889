package outbox

import (
	"errors"
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
)

// Sentinel errors, for callers that branch with errors.Is. Every typed error
// in this package unwraps to one of them.
var (
	// ErrInvalidEvent is the root of every *ValidationError, an event
	// validation failure. When
	// Emit returns it, nothing was written and the transaction is still
	// usable; when a publisher does, it cannot carry the event as it is
	// (see the header rule in the package documentation).
	ErrInvalidEvent = errors.New("pgoutbox: invalid event")
	// ErrInvalidConfig is the root of every *ConfigError: New was given
	// a Config field out of range.
	ErrInvalidConfig = errors.New("pgoutbox: invalid configuration")
	// ErrInvalidInput is the root of every *InputError: a call was given an
	// argument it cannot use. Nothing was read or written.
	ErrInvalidInput = errors.New("pgoutbox: invalid input")
	// ErrInvalidIdentifier is returned for a schema or table name that is not
	// a plain lowercase SQL identifier of at most 63 bytes.
	ErrInvalidIdentifier = errors.New("pgoutbox: invalid identifier")
	// ErrTxDone is returned (in an *InputError for "tx", whose Reason
	// says which) when Emit or an inbox call is given a nil transaction,
	// one already committed or rolled back, or one aborted by an earlier
	// error. It is not an ErrInvalidEvent: the events may be fine, the
	// transaction is not.
	ErrTxDone = errors.New("pgoutbox: transaction cannot be used")
	// ErrSchemaMismatch is the root of the error Verify returns when the
	// database does not hold the objects the library relies on.
	ErrSchemaMismatch = errors.New("pgoutbox: schema does not match")
	// ErrMissingTable is returned (wrapped) when the outbox table a call
	// names does not exist: by a dispatcher's Run at start, before it
	// claims anything, by Emit (and by an inbox's Record for its own
	// table), and by migrations.Verify alongside ErrSchemaMismatch. The usual causes are a Table that differs from
	// the one given to migrations.Migrate, or Migrate not run yet. A
	// table missing for a trigger or function the statement runs does
	// not match it.
	ErrMissingTable = errors.New("pgoutbox: table does not exist")
	// ErrDuplicateID is returned (wrapped, with the ID in its text) by
	// Emit when an event's caller-set ID is already in the outbox table:
	// the primary key refused the row. As after any failed statement,
	// the transaction is aborted and only a rollback remains. A unique
	// violation of any other constraint (one of the caller's own, through
	// a trigger) does not match it.
	ErrDuplicateID = errors.New("pgoutbox: an event with this ID is already in the outbox")
	// ErrLockLost is reported when a worker tries to complete or renew an
	// event whose lease it no longer holds (expired, recovered, or taken by
	// another worker). The row was not changed.
	ErrLockLost = errors.New("pgoutbox: lease lost")
	// ErrOutcomeUnknown is reported when a completion whose reply was lost
	// (a timeout, a broken connection) is retried and the row no longer
	// shows whether the first write took effect: a row that is gone (with
	// DeleteSent most likely deleted by that write, but nothing proves
	// it), or a snooze whose trace another replica's later outcome
	// replaced. No outcome hook fires for it. An outcome the dispatcher
	// wrote is never reported as ErrLockLost.
	ErrOutcomeUnknown = errors.New("pgoutbox: outcome unknown")
	// ErrOutcomeRefused is reported when the database kept refusing the
	// write of one event's outcome (a user trigger or constraint, a
	// missing privilege): the dispatcher let go of the event, whose lease
	// then expires and is recovered.
	ErrOutcomeRefused = errors.New("pgoutbox: outcome refused by the database")
)

// The typed errors below share one shape: Field names the input at fault,
// Reason says what is wrong and what is accepted (never quoting a payload
// or header value), Err is an underlying cause, if any, and Unwrap returns
// the sentinel of the kind (ErrInvalidEvent, ErrInvalidConfig or
// ErrInvalidInput) and Err. Their kind says when the input was given:
//
//   - *ValidationError: an event of a call (Emit, a publisher's Publish),
//     with its position in the call;
//   - *ConfigError: a field of a Config given to a New function;
//   - *InputError: any other argument of a call (a nil pool, a finished
//     transaction, an event type given to Handle, an admin filter, an
//     inbox consumer name).

// ValidationError says which event of a call and which of its fields is
// invalid. Its text never contains payload bytes or header values.
type ValidationError struct {
	// Index is the position of the event in the call: in the events given
	// to Emit, or in the messages given to Publish; 0 for a call that takes
	// one event (NewJSON).
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
	return message(fmt.Sprintf("invalid event %d", e.Index), e.Field, e.Reason, e.Err)
}

// Unwrap returns ErrInvalidEvent and the underlying cause.
func (e *ValidationError) Unwrap() []error { return unwrap(ErrInvalidEvent, e.Err) }

// ConfigError names the Config field whose value is out of range.
type ConfigError struct {
	// Field is the name of the Config field, e.g. "BatchSize" or
	// "Backoff.Initial".
	Field string
	// Reason says what range or form is expected.
	Reason string
	// Err is an underlying cause, if any (for example ErrInvalidIdentifier
	// for a bad table name).
	Err error
}

// Error implements error.
func (e *ConfigError) Error() string {
	return message("invalid configuration", e.Field, e.Reason, e.Err)
}

// Unwrap returns ErrInvalidConfig and the underlying cause.
func (e *ConfigError) Unwrap() []error { return unwrap(ErrInvalidConfig, e.Err) }

// InputError names the argument of a call that is invalid: not a Config
// field and not an event, for example a nil pool, a finished transaction,
// an empty event type given to Handle, or an admin or inbox parameter.
// Nothing was read or written when a call returns it.
type InputError struct {
	// Field names the argument at fault, e.g. "pool", "tx", "eventType",
	// "Limit" or "consumer".
	Field string
	// Reason says what is wrong and what is accepted, in a few words.
	Reason string
	// Err is an underlying cause, if any (ErrTxDone for a nil or finished
	// transaction).
	Err error
}

// Error implements error.
func (e *InputError) Error() string {
	return message("invalid input", e.Field, e.Reason, e.Err)
}

// Unwrap returns ErrInvalidInput and the underlying cause.
func (e *InputError) Unwrap() []error { return unwrap(ErrInvalidInput, e.Err) }

// message is the text every typed error of this package shares:
// "pgoutbox: <what>: <field> <reason>[: <err>]", with err's own
// "pgoutbox: " prefix left out.
func message(what, field, reason string, err error) string {
	msg := errtext.Prefix + what + ": " + field + " " + reason
	if err != nil {
		msg += ": " + errtext.Trim(err.Error())
	}
	return msg
}

func unwrap(kind, err error) []error {
	if err != nil {
		return []error{kind, err}
	}
	return []error{kind}
}
