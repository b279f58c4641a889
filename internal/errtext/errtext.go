// Package errtext builds the text of the library's errors so that each
// carries exactly one "pgoutbox: " prefix, at its start, however many of
// the library's errors it wraps: the outermost error says "pgoutbox: " and
// the texts it quotes of inner errors lose theirs. The wrapped errors stay
// in the chain, so errors.Is and errors.As see them unchanged.
package errtext

import "fmt"

// Prefix begins the text of every error the library returns.
const Prefix = "pgoutbox: "

// Trim returns text without a leading Prefix.
func Trim(text string) string {
	if len(text) >= len(Prefix) && text[:len(Prefix)] == Prefix {
		return text[len(Prefix):]
	}
	return text
}

// Wrap returns an error that reads "pgoutbox: <context>: <err's text
// without its prefix>" and unwraps to err, where context is format
// formatted with args. It returns nil for a nil err.
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &wrapped{context: fmt.Sprintf(format, args...), err: err}
}

// WrapHint is Wrap with a hint appended in parentheses: what to do about
// err ("create it with ...").
func WrapHint(err error, hint, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &wrapped{context: fmt.Sprintf(format, args...), err: err, hint: hint}
}

// WrapAs is Wrap for an error of a kind the caller branches on: it reads
// "pgoutbox: <kind>: <context>: <err>", each without its own prefix (and
// without "<context>: " when format is empty), and matches both kind (a
// sentinel such as outbox.ErrLockLost) and err.
func WrapAs(kind, err error, format string, args ...any) error {
	return &wrapped{kind: kind, context: fmt.Sprintf(format, args...), err: err}
}

// Because returns an error that reads as sentinel and matches both
// sentinel and cause (errors.Is, errors.As): a sentinel that cause, a
// lower-level error such as a *pgconn.PgError, proves.
func Because(sentinel, cause error) error {
	return &because{sentinel: sentinel, cause: cause}
}

type because struct{ sentinel, cause error }

func (b *because) Error() string   { return b.sentinel.Error() }
func (b *because) Unwrap() []error { return []error{b.sentinel, b.cause} }

type wrapped struct {
	kind          error // nil, or a sentinel the text starts with
	context, hint string
	err           error
}

func (w *wrapped) Error() string {
	msg := Prefix
	if w.kind != nil {
		msg += Trim(w.kind.Error()) + ": "
	}
	if w.context != "" {
		msg += w.context + ": "
	}
	msg += Trim(w.err.Error())
	if w.hint != "" {
		msg += " (" + w.hint + ")"
	}
	return msg
}

func (w *wrapped) Unwrap() []error {
	if w.kind != nil {
		return []error{w.kind, w.err}
	}
	return []error{w.err}
}
