// Package store holds every SQL statement of the log relay (issue 27,
// docs/relay-design.md): the ticker's lease and its tick call, the parts
// kept ahead of the current transaction id, the consumer groups' cursors
// under token-fenced leases, the batch read and the cursor move with its
// parked events. The ticker (internal/relay/ticker) and the group reader
// (internal/relay/read) drive it; nothing else of the relay writes SQL.
// Package admin calls it too where an operator does what the relay does
// (CreateGroup, DropGroup, Groups and their lag, PartsState, AddParts).
//
// # Ticks
//
// A tick is a row of <log>_ticks holding pg_current_snapshot() of the
// SECURITY DEFINER function <log>_tick, which the ticker lease's holder
// calls (migrations/log/001_log.sql). The function locks the lease row
// first and takes the snapshot in a later statement, so a tick's snapshot
// is never older than the tick before it; it refuses a snapshot whose
// xmax went backwards (SQLSTATE PGR02), and answers PGR01 when the lease
// is not held.
//
// # Batches
//
// For the cursor tick c and a target tick t, a batch is every event whose
// xid is visible in t's snapshot and not in c's, in seq order. The
// candidates are the xids in [xmax_c, xmax_t) and those in c's xip but
// not t's (done, computed here from the snapshots' text, see snap.go),
// so a transaction open across many ticks is read once, in the batch of
// the first tick that sees it committed, and its age costs nothing. The
// target is the newest tick whose last_seq is within span events of c's
// (at least the next tick: ticks merge when the reader is behind). The
// target is written to the cursor (batch_tick) before the events are
// read, and a batch moved in pieces is recorded as (batch_tick,
// batch_seq) by each piece's Move, so that a restart resumes the same
// set.
//
// # Streams
//
// The reader reads a batch once: Stream (ReadStream for the batch read
// ahead, whose target the move before it records) runs the events
// statement without a limit and hands its rows out in pieces (Next), each
// moved as a batch of its own: a partial piece records (batch_tick,
// batch_seq = its last seq), the last piece moves last_tick to the target.
// A resume streams seq > batch_seq against the same target, once. The
// target may merge ticks up to span events (the reader passes several
// times MaxBatch). The statement holds a pool connection, and its
// snapshot, until its last row is read or the stream is closed (an
// unfinished stream is cancelled and its connection dropped): while the
// pieces publish, the cluster's xmin horizon waits for it, for the batch's
// events only (docs/relay.md section 5). Its parameters are text, as every
// statement's here.
//
// # Fencing
//
// Every write to the ticker or a cursor matches the holder's token and an
// unexpired lease (lease_until, from the database clock), as in
// internal/lease; a cursor move also matches the position it moves from.
// A writer that lost its lease changes nothing and gets ErrLeaseLost.
//
// # Requests on parked keys
//
// An operator's replay or skip of a parked key is a request on its row of
// <log>_parked_keys (admin.RequestReplay, admin.RequestSkip). The reader
// reads them (Requests, ParkedEvents for the keys to replay) and carries
// them out in its next cursor move (MoveWith with Outcome.Unpark and
// Clear), or, with no batch to move, in a transaction fenced as a move is
// (Settle): the keys' parked events and key rows are deleted before the
// move's own parked rows are written, so a replayed key that fails again
// is parked anew in the same transaction.
//
// # Going backwards
//
// TakeGroup and Stream (and ReadStream) check that the target tick is
// after the cursor tick with an xmax and xmin not below it, and that the
// newest tick is not behind the newest this Store has seen (a restore of
// an older backup rolls ticks and cursors back together; only the
// running process remembers). TakeGroup also checks that the cluster's transaction ids
// are not behind the newest tick (a logical dump restored into a cluster
// whose ids are lower). A failed check returns ErrSnapshotBackwards; the
// reader then stops the group (StopGroup records the reason) and
// publishes nothing. The ticks' system identifiers are recorded, not
// compared: pg_upgrade keeps the transaction ids under a new one.
//
// # Privileges
//
// The ticker needs UPDATE on <log>_ticker and EXECUTE on <log>_tick and
// <log>_part_add; a reader SELECT on the log and <log>_ticks, UPDATE on
// <log>_cursors, and SELECT, INSERT, UPDATE and DELETE on
// <log>_parked_keys and <log>_parked (replay and skip). CreateGroup and DropGroup (an operator's) need INSERT and
// DELETE on <log>_cursors and DELETE on the parked tables.
//
// Every value is passed as text (xid8, pg_snapshot, uuid), so that every
// pgx exec mode and a transaction-mode pooler work.
package store
