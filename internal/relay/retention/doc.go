// Package retention is the log relay's retention service
// (docs/relay-design.md, section 5): it frees what every consumer group
// of a log has delivered. One pass calls the log's SECURITY DEFINER
// functions of migrations/log/002_log_retention.sql, which compute the
// rule themselves: <log>_part_truncate empties the parts of the log below
// every group's cursor (a part another session holds is busy, skipped
// without waiting and tried again next pass), and <log>_tick_trim
// deletes, in batches, the ticks below every group's cursor tick (under
// a NOWAIT lock on the cursors, so that a group being created is never
// left on a deleted tick: busy, it deletes nothing this pass). Then,
// when the pass's role owns the log, it detaches (CONCURRENTLY, in
// autocommit) and drops the empty retired parts; otherwise it counts them
// as waiting for an owner (outboxctl relay maintain, run as the owner,
// drops them).
//
// The relay runs the service on the replica that holds the ticker's lease
// (Config.Held); outboxctl relay maintain runs one pass (Service.Pass).
// With no group nothing is retired: the log keeps everything.
package retention
