package outbox

import "fmt"

// TableKind says what a [Table] is: an outbox that dispatchers claim event
// by event, or a log that a relay reads in snapshot-bounded batches (the
// relay package). migrations.Config and emitter.Config take it; the kind is
// declared, not discovered, and Verify and the relay's start checks catch a
// table of the other kind.
type TableKind int

const (
	// KindOutbox is the default: the outbox table of the dispatcher
	// (per-event leases, retries, due times, local handlers).
	KindOutbox TableKind = iota
	// KindLog is an append-only log table read by the relay: one heap row
	// and one index entry per event, no per-event UPDATE, partitioned by
	// the writing transaction's id so that retention truncates whole
	// parts.
	KindLog
)

// String returns "outbox" or "log", or "TableKind(N)" for another value.
func (k TableKind) String() string {
	switch k {
	case KindOutbox:
		return "outbox"
	case KindLog:
		return "log"
	}
	return fmt.Sprintf("TableKind(%d)", int(k))
}
