// Package batch holds the types the log relay's services pass between
// them: an event as read from the log, a tick, a batch (the events between
// two ticks), a cursor and a parked event. It is a leaf: no SQL, no
// goroutines.
package batch

import (
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Event is one row of the log: the event as emitted, with the log's own
// columns.
type Event struct {
	// Seq is the log's insert order; within a batch events are in Seq
	// order.
	Seq int64
	// Xid is the writing transaction's id (xid8, with its epoch).
	Xid uint64
	// Event is the event as emitted (CreatedAt from the log; Delay,
	// Attempt and Snoozes are zero).
	Event outbox.Event
}

// Key is the event's order key (outbox.OrderKey): its PartitionKey, else
// its AggregateID, else "" (no key: it orders with nothing).
func (e Event) Key() string { return outbox.OrderKey(e.Event) }

// Tick is one recorded snapshot.
type Tick struct {
	ID int64
	// Snapshot is the pg_snapshot as text: "xmin:xmax:xip,xip,...".
	Snapshot string
	Time     time.Time
	// LastSeq is the log's seq sequence's last value at the tick.
	LastSeq int64
	// Sysid is the cluster's system identifier at the tick.
	Sysid int64
}

// Cursor is a consumer group's position: every event visible in
// LastTick's snapshot is done. BatchTick, when not zero, is an open batch's
// target tick and BatchSeq the last seq done in it (a batch cut at
// MaxBatch, resumed with seq > BatchSeq against the same target).
type Cursor struct {
	Group     string
	LastTick  int64
	BatchTick int64
	BatchSeq  int64
}

// Batch is the events of one consumer group between two ticks: visible in
// To's snapshot, not in From's, with seq > AfterSeq, in seq order. Partial
// says the read stopped at MaxBatch events: the cursor then records
// (To, the last seq) rather than moving to To.
type Batch struct {
	From, To Tick
	AfterSeq int64
	Events   []Event
	Partial  bool
}

// Parked is an event a group set aside: its key's events wait until an
// operator replays or skips the key. Key is "" for an event without one
// (parked alone).
type Parked struct {
	Event Event
	Key   string
	// Code is outbox.ErrorCode of the failure; Err its text (no payload).
	Code string
	Err  string
}
