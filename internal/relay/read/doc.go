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
// # Order, pieces and reading ahead
//
// A batch is read once, as a stream (store.Stream), and published in
// pieces of MaxBatch, one after the other, each once the previous one's
// cursor move committed (a partial piece records batch_tick and
// batch_seq, the last moves last_tick). While a piece publishes, the
// next one is read from the stream; after the last piece the next
// batch's stream is opened (store.ReadStream from the cursor its move
// will give, store.Next) and its first piece read, and that move records
// its target as the open batch (Outcome.Ahead), so a restart resumes
// exactly the batch read ahead. At most two pieces are in memory
// (Config.NoReadAhead reads the next piece only once one published). A
// piece read ahead is not published before the move of the one before it
// committed; a failed read drops the stream, which opens again from the
// cursor. The stream is closed (cancelled) when the lease is lost, the
// reader drains or a publish fails. Replay and skip requests and Drain
// act at piece boundaries, which are batch boundaries; the backwards
// checks run before each stream (a restore breaks the stream's
// connection, and the stream opened again is checked).
//
// # Replay and skip of parked keys
//
// An operator's request on a parked key (admin.RequestReplay,
// admin.RequestSkip) is carried out at a batch boundary, before the batch
// publishes: the requests are read every RequestsEvery batches, and at
// every poll while the group is caught up. A skipped or replayed key is
// unparked in memory, so its events of the batch publish; a replayed
// key's parked events (seq order) go to the lanes before the batch's, so
// the key's order holds, and if one fails again the lanes park the key
// anew. The key's old rows are deleted in the batch's cursor move (with
// no batch, in a transaction fenced as one, store.Settle), before its new
// parked rows are written. A request on a key the reader has not parked
// is cleared. When the lease is lost before that move, nothing of the
// request is recorded, and the next holder carries it out (the events
// replayed may then be published twice: at-least-once). Known limits:
// a replay publishes every parked event of the key in one batch; a
// request made while the reader carries out an earlier one on the same
// key is dropped with the key's row.
//
// # Stopping
//
// A snapshot that went backwards (store.ErrSnapshotBackwards), at lease
// acquisition or
// before a batch, stops the group: StopGroup records the reason, nothing
// of that batch is published, and Run returns a *StopError. A group found
// stopped already gives a *StopError too.
package read
