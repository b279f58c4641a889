package chaos

import (
	"time"

	"github.com/google/uuid"
)

// This file holds what a relay scenario records (issue 27,
// docs/relay-design.md section 7); CheckRelay (relay_check.go) judges it.

// LedgerEntry is one committed business row of a relay scenario: the
// event its transaction emitted into the log, the key it locked and the
// version it got. The writer takes the key's row lock with
// `UPDATE keys SET v = v + 1 ... RETURNING v` before it emits, so the
// commit order of one key's events is their V order.
type LedgerEntry struct {
	ID  uuid.UUID
	Key string
	// V is the key's version after the writer's bump: 1, 2, 3, ... per
	// key, one per committed transaction that locked the key.
	V int64
	// Xid is the writing transaction's top-level id (xid8), which the log
	// row holds too.
	Xid uint64
	// Seq is the log row's seq (insert order); 0 when unknown, and then no
	// partial cursor move (one that records batch_seq) counts as covering
	// the event.
	Seq int64
}

// Delivery is one broker ack of one event, appended by the scenario's
// publisher wrapper (Recorder.WriteDelivery) after the broker acked it and
// before the relay learned of the ack: every delivery precedes the cursor
// move that may follow it.
type Delivery struct {
	ID  uuid.UUID
	Key string
	V   int64
	// Replica names the publishing process; it must be the relay's
	// Config.Owner, which the cursor log records with each take: that is
	// how the checker finds the token a delivery was published under.
	Replica string
	// Call numbers the wrapper's Publish calls in the process (from 1),
	// for the report.
	Call int64
	// At is the wall clock when the ack was recorded.
	At time.Time
	// Token is the group lease token the batch was published under, when
	// the relay tells the wrapper (uuid.Nil otherwise: the checker takes
	// the token of the replica's last take of the group before At).
	Token uuid.UUID
}

// CursorEntry is one change of a consumer group's cursor row, as the
// trigger of InstallCursorLog logged it in the changing transaction: a
// rolled back move leaves no entry. Updates that change none of the
// tick, batch, token, owner or stop columns (lease renewals) are not
// logged. Zero values stand for NULL.
type CursorEntry struct {
	Group string
	// Op is INSERT (the group created), UPDATE or DELETE (dropped).
	Op                         string
	OldLastTick, NewLastTick   int64
	OldBatchTick, NewBatchTick int64
	OldBatchSeq, NewBatchSeq   int64
	OldToken, NewToken         uuid.UUID
	OldOwner, NewOwner         string
	// OldLeaseUntil is lease_until before the change.
	OldLeaseUntil time.Time
	// NewStopped is stopped_reason after the change.
	NewStopped string
	// At is clock_timestamp() at the change; StatementAt is the writing
	// statement's start and XactAt its transaction's (now()), no later
	// than the writer's test of the lease, whichever clock it reads.
	At, StatementAt, XactAt time.Time
	// Writer is the writing session's application_name.
	Writer string
}

// Take reports whether e gave the group to a new token.
func (e CursorEntry) Take() bool {
	return e.Op == "UPDATE" && e.NewToken != uuid.Nil && e.NewToken != e.OldToken
}

// Move reports whether e moved the cursor: a new last_tick, or a new
// batch_seq within an open batch (a partial batch done).
func (e CursorEntry) Move() bool {
	return e.Op == "UPDATE" && (e.NewLastTick != e.OldLastTick || e.partial())
}

// partial reports whether e recorded progress inside an open batch.
func (e CursorEntry) partial() bool {
	return e.NewLastTick == e.OldLastTick && e.NewBatchTick != 0 && e.NewBatchSeq != 0 &&
		(e.NewBatchTick != e.OldBatchTick || e.NewBatchSeq != e.OldBatchSeq)
}

// covers reports whether the move e marked done an event first visible
// in tick tick with log seq seq.
func (e CursorEntry) covers(tick, seq int64) bool {
	switch {
	case !e.Move() || tick == 0:
		return false
	case e.NewLastTick > e.OldLastTick:
		return e.OldLastTick < tick && tick <= e.NewLastTick
	default: // partial
		return seq != 0 && e.NewLastTick < tick && tick <= e.NewBatchTick && seq <= e.NewBatchSeq
	}
}

// TickRecord is one tick of the log as its copy (InstallCursorLog) kept
// it: retention may delete the log's own tick rows, not the copy.
type TickRecord struct {
	ID int64
	// Snapshot is the pg_snapshot as text, "xmin:xmax:xip,...".
	Snapshot string
}

// RelayInput is everything recorded in one relay scenario.
type RelayInput struct {
	// Group is the consumer group the relays read; cursor entries of
	// other groups are ignored.
	Group string
	// Ledger is the truth: the committed business rows.
	Ledger []LedgerEntry
	// RolledBack names events emitted by transactions (or savepoints)
	// rolled back on purpose: a delivery of one is unexpected, and the
	// report says why.
	RolledBack []uuid.UUID
	// Deliveries are the publisher wrappers' records of every replica.
	Deliveries []Delivery
	// Cursor is the cursor log, oldest first; Ticks the copy of the
	// ticks, in any order.
	Cursor []CursorEntry
	Ticks  []TickRecord
	// Parked names the events found in the log's parked table at the end.
	Parked []uuid.UUID
	// Kills, Pauses and Outages are the faults injected; Faults counts
	// every fault by kind, for the report. Kills and Outages explain
	// duplicates; a pause explains none by itself: the take of the group
	// by another token that it allowed, in Cursor, does.
	Kills   []Kill
	Pauses  []Pause
	Outages []Outage
	Faults  map[string]int
	// FaultsEnded is when the last fault healed; Drained when every
	// ledger event had been delivered (zero: never).
	FaultsEnded, Drained time.Time
}
