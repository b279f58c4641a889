// Package admin is the operator's side of the outbox: it reads the table
// to show what is waiting, running, sent and dead, and it makes the
// changes an operator needs by hand: replaying FAILED events, skipping a
// FAILED event that holds its order key, and purging finished ones.
// cmd/outboxctl is a command line over it; a service may also call it
// from its own admin endpoints. Emitting, claiming and
// completing belong to the emitter, lease and dispatcher packages; admin
// never touches a row that a dispatcher holds.
//
//	Counts      ─ rows per status, due backlog, age of the oldest due row
//	Summary     ─ Counts, and rows per type and status, FAILED rows per code
//	List        ─ keyset pages of rows (no payloads), by seq
//	Inspect     ─ one row in full: payload, headers, attempt log
//	Replay      ─ FAILED ──▶ PENDING (due now, fresh budget) + pg_notify
//	BlockedKeys ─ pages of order keys whose head is FAILED (per-key ordering)
//	SkipHeads   ─ FAILED ──▶ FAILED with skipped_at (all or none) + pg_notify
//	Purge       ─ delete SENT or FAILED rows older than a cut-off
//
// # Invariants
//
//   - Replay and SkipHeads change FAILED rows only, and Purge deletes
//     SENT or FAILED rows only: PENDING and PROCESSING rows are never
//     changed or deleted, so admin cannot break a lease or lose an event
//     still to deliver.
//   - Every write is one bounded statement: at most 10,000 rows per Replay
//     and 100,000 per Purge. The rows are locked in a sub-select with
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
// A replayed row becomes PENDING with next_attempt_at = now(), attempts,
// recoveries and snoozes 0 and failed_at NULL: it gets the whole retry
// and snooze budget again. last_error_code, last_error and the attempt log stay as history.
// The UPDATE and a pg_notify on the outbox's channel (the emitter's
// default, see internal/sqlname) run in one transaction, so dispatchers
// wake when the replay commits; a missed notification only delays the
// event until the next poll. Replay by id reports the ids it did not
// change (not FAILED, missing, or locked by a concurrent writer) as
// skipped.
//
// # Cost
//
// No read costs in proportion to the SENT rows a table keeps, and
// TestOperatorPlansOnAMillionRows checks each plan (no sequential scan, a
// bounded number of buffers on a million rows, 99% SENT):
//
//   - Counts and Summary count PENDING, PROCESSING and FAILED rows
//     exactly, each through its status's partial index, so their cost
//     follows the rows in those statuses; SENT rows are counted up to
//     [SentCountLimit] and estimated past it. Counts.DueBlocked reads at
//     most [BlockedCountLimit] FAILED rows, probes the order index once
//     per key of one and counts at most SentCountLimit rows behind them
//     (TestDueBlockedIsBoundedOnManyFailedKeys: 100,000 FAILED keys).
//   - PendingByType reads the type due index, PENDING rows only.
//   - List reads every page, the first or the millionth, from an index
//     chosen by its filter (seq, type, aggregate id, error code, or the
//     status's partial index): a page costs its rows, except a page
//     filtered on a status, which reads and sorts that status's rows
//     after the cursor (a PENDING backlog: page it by type instead).
//   - BlockedKeys walks the order index, at most [BlockedScanLimit] keys
//     per call.
//   - Replay, SkipHeads and Purge take at most their limit of rows, in
//     the order of the index they read.
//
// docs/admin.md gives each statement's index and measured cost, and a
// retention loop for Purge.
package admin
