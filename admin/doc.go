// Package admin is the operator's side of the outbox: it reads the
// outbox to show what is waiting, running, sent and dead, and it makes
// the changes an operator needs by hand: replaying FAILED events,
// skipping a FAILED event that holds its order key, and purging finished
// ones. cmd/outboxctl is a command line over it; a service may also call
// it from its own admin endpoints. Emitting, claiming and completing
// belong to the emitter, lease and dispatcher packages; admin never
// touches a row that a dispatcher holds.
//
// Since schema version 10 an outbox is three tables (docs/schema.md):
// the outbox table T holds the work still to do, PENDING and PROCESSING
// rows; the dead letters T_dead the FAILED rows; the history T_sent,
// partitioned by sent_at, the SENT rows. A row keeps its id and seq when
// it moves between them. SENT or FAILED rows still in T (strays: left by
// the upgrade, or written by a dispatcher of version 9 still running)
// are counted apart (Counts.Unmoved) until the retention pass moves them.
//
//	Counts      ─ rows per status (and strays), due backlog, age of the oldest due row
//	Summary     ─ Counts, and rows per type and status, FAILED rows per code
//	List        ─ keyset pages of rows (no payloads), by seq, across the tables
//	Count       ─ the rows a List filter matches, up to MaxCount
//	Activity    ─ sent, retried and failed in the last minutes; lease owners holding rows
//	Inspect     ─ one row in full: payload, headers, attempt log
//	Replay      ─ T_dead ──▶ T as PENDING (due now, fresh budget) + pg_notify
//	BlockedKeys ─ pages of order keys whose head is FAILED (per-key ordering)
//	SkipHeads   ─ FAILED ──▶ FAILED with skipped_at (all or none) + pg_notify
//	Purge       ─ delete dead letters, retire SENT history, older than a cut-off
//	AuditLog    ─ pages of the audit log: who replayed, skipped or purged what, newest first
//
// # Invariants
//
//   - Replay and SkipHeads change dead letters only, and Purge deletes
//     dead letters and SENT history only: PENDING and PROCESSING rows are
//     never changed or deleted, so admin cannot break a lease or lose an
//     event still to deliver. Replay inserts into T only rows whose id T
//     does not hold (ON CONFLICT DO NOTHING), and deletes a dead letter
//     only once its insert succeeded, in the same statement: a replay
//     never loses a dead letter (ReplayResult.Conflicts).
//   - Every write is one bounded statement: at most 10,000 rows per Replay
//     and 100,000 per Purge batch (a SENT purge also drops whole history
//     partitions, see Purge). The rows are locked in a sub-select with
//     FOR UPDATE SKIP LOCKED and reached through the primary key with
//     "id = ANY(ARRAY(SELECT …))", never "id IN (SELECT … LIMIT n)", which
//     the planner may turn into a join that touches more than n rows.
//   - Every time comparison and timestamp (due now, the purge cut-off, the
//     age of the oldest due row) uses the database clock.
//   - Invalid parameters give an [*outbox.InputError] (errors.Is
//     [outbox.ErrInvalidInput]) before any statement runs; nothing is written.
//   - No error contains payload or header bytes.
//   - SkipHeads locks its rows with SKIP LOCKED too, and writes all the
//     named rows or none: a row it could not lock fails the call.
//   - With DryRun set, Replay, SkipHeads and Purge report what the same
//     call would change, reading without locks, and change nothing.
//
// # Replay
//
// A replayed row goes back into T with its id and seq (INSERT …
// OVERRIDING SYSTEM VALUE: T's seq is an identity column), as PENDING
// with next_attempt_at = now(), attempts, recoveries and snoozes 0 and
// failed_at NULL: it gets the whole retry and snooze budget again, and
// keeps its place in its key's order. last_error_code, last_error and the
// attempt log stay as history. The move (insert, then delete of the dead
// letters inserted) and a pg_notify on the outbox's channel (the
// emitter's default, see internal/sqlname) run in one transaction, so
// dispatchers wake when the replay commits; a missed notification only
// delays the event until the next poll. Replay by id reports the ids it
// did not move (not a dead letter, missing, locked by a concurrent
// writer, or a conflict) as skipped.
//
// # Audit
//
// An [Actor] on ReplayParams, SkipParams or PurgeParams audits the call:
// one row in the outbox's audit table (<table>_audit, schema version 13)
// with the actor, the source, the action, its parameters (ids, type,
// code, times, limits: never a payload) and the rows it changed, inserted
// in the action's own transaction. Both commit or neither does: a crash
// cannot leave an action without its row, nor a row without its action.
// A dry run writes no row. Once committed, one Info line goes to
// Config.Logger. An audited SENT purge runs its batch and every
// partition it retires in that one transaction (see [Admin.Purge]).
// [Admin.AuditLog] pages the rows newest first. The operator console
// (admin/console) and outboxctl audit every action they run.
//
// # The log relay
//
// [Relay] (NewRelay) is the operator's side of a log (a table migrated
// with outbox.KindLog, docs/relay-design.md) and its consumer groups:
//
//	Status, Groups, Group ─ ticker lease, newest tick, parts and head-room; per group
//	                        cursor, lease holder, lag (events, seconds), stopped reason
//	ParkedKeys, ParkedEvents ─ pages of a group's parked keys and events (payload on request)
//	RequestReplay, RequestSkip ─ record a request on a parked key; the group's reader
//	                        carries it out at a batch boundary, in that batch's cursor move
//	Resume                ─ clear a stopped group's reason
//	CreateGroup, DropGroup ─ a cursor at the newest or the oldest tick; drop with its parked rows
//	Maintain              ─ one retention pass (truncate passed parts, trim ticks, drop parts as owner)
//
// Replay and skip are requests, not moves: done here they would race the
// reader's batch not yet read that holds the key's newer events. Unknown
// groups and keys give errors matching [ErrUnknownGroup] and
// [ErrUnknownKey].
//
// # Cost
//
// No read costs in proportion to the SENT history, and
// TestOperatorPlansOnAMillionRows checks each plan on a million events
// (99% SENT, in five partitions; 995 dead letters; a backlog of 5,000):
// no sequential scan of the history, nor of a big T or T_dead, and a
// bounded number of buffers:
//
//   - Counts and Summary count PENDING and PROCESSING rows exactly
//     through T's due and held indexes (the backlog), FAILED rows exactly
//     in T_dead (all of them), SENT rows in the history up to
//     [SentCountLimit] (its seq index, one scan per partition merged) and
//     estimate past it from the partitions' pg_class statistics, and the
//     strays up to SentCountLimit through T's stray index.
//     Counts.DueBlocked reads at most [BlockedCountLimit] dead letters in
//     the dead order index, probes T's order index once per key of one and
//     counts at most SentCountLimit rows behind them
//     (TestDueBlockedIsBoundedOnManyFailedKeys: 100,000 dead letters).
//   - PendingByType reads every PENDING row once (T has no type index
//     since schema version 11: every index of T costs each Emit): its cost
//     is the backlog, 34,138 pages for 1,000,000 PENDING rows as measured
//     (6.3 s from a cold cache on a loaded 2-core machine).
//   - List reads each status where it lives: SENT rows through the
//     history's seq, type or aggregate index and FAILED rows through the
//     dead letters' seq, type, aggregate or code index, a page costing its
//     rows (a page of SENT rows by Code, Key or creation time, without
//     AggregateID, reads at most [ListScanLimit] history rows: the
//     history has no index for those);
//     PENDING and PROCESSING rows through T's due and held indexes, whose
//     rows are all read and sorted (T has no index in seq order): such a
//     page costs the backlog. Without a status, a page merges the tables
//     by seq, a page from each.
//   - Inspect probes T's primary key, then T_dead's, then the history's id
//     index once per partition.
//   - BlockedKeys walks the dead order index, at most [BlockedScanLimit]
//     keys with a dead letter per call, probing T's order index per key.
//   - Replay, SkipHeads and the Purge batches take at most their limit of
//     rows, in the order of the index they read.
//
// docs/admin.md gives each statement's index and measured cost, and a
// retention loop for Purge.
package admin
