// Package read runs one consumer group's reader of the log relay (issue
// 27, docs/relay-design.md sections 3 and 4): it holds the group's cursor
// lease, reads the batch between the cursor tick and a later tick
// (internal/relay/store), hands it to the publishing engine
// (internal/relay/lanes, through Publisher) and moves the cursor once every
// event of the batch is published or parked, with the parked events and
// keys in the same transaction.
//
// # Leases
//
// Run takes the group's lease (trying again every third of Lease while
// another reader holds it) and renews it every third of Lease on a
// goroutine of its own. It trusts the lease until Lease after the start
// of the last renewal that succeeded. When a renewal or a move finds the
// lease lost, or the trust runs out, the batch being published is
// abandoned (its context is cancelled), nothing is moved, and Run takes
// the lease again: the events of that batch are published again by
// whoever holds the group next (at-least-once; the event id dedupes).
//
// # Order
//
// One batch at a time: the next batch is read after the cursor moved
// (Move), so that a restart resumes exactly the cursor's batch. Reading
// the next batch while one publishes (the design's InFlightBatches) is not
// done yet: its open-batch record would have to be written by the
// previous batch's move.
//
// # Stopping
//
// A snapshot that went backwards or a changed database (store's
// ErrSnapshotBackwards, ErrDatabaseChanged), at lease acquisition or
// before a batch, stops the group: StopGroup records the reason, nothing
// of that batch is published, and Run returns a *StopError. A group found
// stopped already gives a *StopError too.
package read
