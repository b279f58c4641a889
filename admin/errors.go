package admin

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrNotFound is returned (wrapped) by [Admin.Inspect] when no row has the
// given id.
var ErrNotFound = errors.New("pgoutbox: admin: event not found")

// notFoundError is what Inspect returns for an id no row has: it reads
// "pgoutbox: admin: inspect <id> in <table>: event not found" (the
// sentinel's "admin:" once) and matches ErrNotFound.
type notFoundError struct{ id, table string }

func (e *notFoundError) Error() string {
	return "pgoutbox: admin: inspect " + e.id + " in " + e.table + ": event not found"
}

func (e *notFoundError) Unwrap() error { return ErrNotFound }

// inputErr builds an *outbox.InputError with a formatted reason.
func inputErr(field, format string, args ...any) error {
	return &outbox.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// checkText checks a filter that is compared with a text column: it must
// be valid UTF-8 without NUL, which is all PostgreSQL text can hold. The
// reason never quotes the value.
func checkText(param, value string) error {
	if reason := pgvalue.TextProblem(value, math.MaxInt); reason != "" {
		return inputErr(param, "%s", reason)
	}
	return nil
}

// checkTime checks an instant compared with a timestamptz column: zero
// (no filter) or in the years 1 to 9999, the range RFC 3339 and JSON can
// write (PostgreSQL's own is wider, and fails a statement beyond it).
func checkTime(param string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return inputErr(param, "is in the year %d, must be in the years 1 to 9999 (or zero for any)", y)
	}
	return nil
}

// checkLimit applies def to a zero limit and checks the range 1..max.
func checkLimit(limit, def, max int) (int, error) {
	if limit == 0 {
		return def, nil
	}
	if limit < 1 || limit > max {
		return 0, inputErr("Limit", "is %d, must be 1 to %d (0 means %d)", limit, max, def)
	}
	return limit, nil
}
