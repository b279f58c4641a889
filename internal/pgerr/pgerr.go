// Package pgerr classifies the errors that PostgreSQL and pgx return, for
// the packages that must tell an unusable transaction, a cancelled
// statement, a missing column or a lock they gave up waiting for from
// other failures. It holds the SQLSTATE codes they test, named once.
package pgerr

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// SQLSTATE codes the library acts on.
const (
	// InFailedTx: the transaction is aborted by an earlier error.
	InFailedTx = "25P02"
	// QueryCanceled: statement_timeout or a cancel request ended the
	// statement.
	QueryCanceled = "57014"
	// UndefinedColumn: the table lacks a column the statement names.
	UndefinedColumn = "42703"
	// LockNotAvailable: the statement gave up waiting for a lock
	// (lock_timeout).
	LockNotAvailable = "55P03"
	// UniqueViolation: a row repeats the key of a unique constraint.
	UniqueViolation = "23505"
	// DuplicateTable: a relation of that name exists (CREATE of an index
	// or table another session created first).
	DuplicateTable = "42P07"
	// DeadlockDetected: the server cancelled the statement to break a
	// deadlock.
	DeadlockDetected = "40P01"
	// UndefinedTable: the table (or its schema) the statement names does
	// not exist.
	UndefinedTable = "42P01"
	// InsufficientPrivilege: the role lacks a privilege the statement
	// needs.
	InsufficientPrivilege = "42501"
)

// Code returns the SQLSTATE of the PostgreSQL error in err's chain, or ""
// when there is none.
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// OwnMissingTable reports whether err says that a table the statement
// itself names does not exist: SQLSTATE 42P01 raised by the statement, not
// by a trigger or function it ran (a trigger writing to a dropped table of
// its own is not about the caller's table). Such an error has neither a
// context (Where) nor an internal query.
func OwnMissingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == UndefinedTable && pgErr.Where == "" && pgErr.InternalQuery == ""
}

// TxUnusable returns the *outbox.InputError naming "tx" (matching
// outbox.ErrTxDone) that err calls for when it says the caller's
// transaction is committed, rolled back or aborted, and nil otherwise.
func TxUnusable(err error) *outbox.InputError {
	switch {
	case errors.Is(err, pgx.ErrTxClosed):
		return TxError("is already committed or rolled back", err)
	case Code(err) == InFailedTx:
		return TxError("is aborted by an earlier error (roll it back)", err)
	}
	return nil
}

// TxError is the *outbox.InputError for a transaction the caller passed
// that cannot be used: it names "tx", says why and matches
// outbox.ErrTxDone and cause (if any).
func TxError(reason string, cause error) *outbox.InputError {
	err := outbox.ErrTxDone
	if cause != nil {
		err = fmt.Errorf("%w: %w", outbox.ErrTxDone, cause)
	}
	return &outbox.InputError{Field: "tx", Reason: reason, Err: err}
}

// IsNil reports whether v is nil or a nil pointer in a non-nil interface
// (var t *pgxpool.Tx; passed as a pgx.Tx).
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// RanOutOfTime reports whether a statement failed for lack of time: a
// statement_timeout (or any cancellation by the server) or the
// operation's own timeout.
func RanOutOfTime(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || Code(err) == QueryCanceled
}
