// Package lease holds the statements that move event rows in and out of
// PROCESSING: claim, renew, fenced completion, recovery of expired leases
// and release. Each takes a whole batch in one statement; none is ever run
// once per row. The dispatcher package drives them.
//
// The package is internal on purpose: its types spell out the SQL and the
// row state machine (tokens, started_at, recoveries), which must stay free
// to change between minor versions without breaking anyone. What users
// may rely on is the dispatcher's behaviour and the table's documented
// columns (docs/schema.md), not these calls; tools that need a transition
// use the admin package, which keeps the same fencing rules.
//
// # Tables
//
// The statements work on three tables (schema version 10, docs/schema.md):
// the outbox table, which holds the PENDING and PROCESSING rows; its dead
// letters (suffix _dead), which hold the FAILED rows; and its SENT
// history (suffix _sent), partitioned by sent_at. A success (unless
// DeleteSent, which deletes the row) and every FAILED outcome (a final
// failure, a recovery past the cap or under at-most-once, a refused
// outcome) move the row: one statement deletes it from the outbox table,
// fenced as before, and inserts it into the other table with the columns
// of the outcome (WITH … DELETE … RETURNING … INSERT; the move names every
// column, see sqlname.Columns). Retries, snoozes, releases and recoveries to
// PENDING stay updates in place. The outbox table keeps only the due,
// held, order and primary key indexes (schema version 11), so a renewal
// and a start mark change no indexed column: HOT updates, which add no
// index entry (TestRenewalIsAHotUpdate). A FAILED or SENT row still in
// the outbox table is a stray (of a dispatcher of version 9, or a
// refused outcome written in place, see Refused), which the retention
// pass moves; the statements treat strays as version 9 did.
//
// # Claim
//
// One statement locks up to N due PENDING rows in a materialized CTE on the
// outbox table alone (FOR UPDATE SKIP LOCKED, ordered by next_attempt_at,
// seq to match the partial index of due rows), and turns them into
// PROCESSING with a fresh random token, the owner's name, locked_at and
// lease_until from the database clock. Rows locked by another claimer are
// skipped, never waited for, and a row is never handed to two claimers.
//
// A claim may be restricted to some event types (ClaimParams.Types): it
// is then the same statement with "AND event_type = ANY($types)" on the
// same walk of the due index, one form for every dispatcher. Its plan
// does not depend on the number of types: a claim of 200 types has the
// plan of a claim of 1, node for node, and its locking read scans the due
// index only (TestTypedClaimPlanDoesNotGrowWithTypes). What it pays
// instead is the due rows of other types before its own in due order,
// which it walks past: a dispatcher of some types behind a backlog of
// types that no running dispatcher claims reads that backlog at every
// claim (the legs of schema version 9 read one type due index range per
// type and skipped it, at a cost that grew with the types and an index
// entry per event at every transition). It runs under planner settings
// that keep the walk an ordered index scan (typedPlans), as the ordered
// claims do. Its three forms mark rows started exactly as the claim of
// every type does: the same started_at expressions, so that no form marks
// a suspect. Waiting counts, per type not claimed, the rows left waiting
// among those due longest, from the same index and bounded in all.
//
// # Ordered claim
//
// With ClaimParams.Ordered a claim takes, per order key (coalesce(
// partition_key, aggregate_id), the same as kafkapub's default key), only a
// run: a prefix of the key's blockers in seq order starting at its head,
// all due PENDING. The blockers of a key are its PENDING rows (due or
// not: a retry or a snooze waiting counts), its PROCESSING rows and, under
// BlockFailed, its FAILED rows that no operator skipped (skipped_at): its
// dead letters (and strays); the head is the blocker with the lowest seq.
// Dead letters keep their seq, so seq orders a key's rows of both tables
// as one: the head test and the runs probe the dead order index (key,
// seq) once per key, beside the order index (deadHead, barriers). Rows without a key are claimed
// as by the unordered claim. It is still one statement, in three parts:
//
//   - Candidate filter. A due PENDING row is read only if its key's head
//     is a due PENDING row. The head is found by one probe of the order
//     index (key, seq, over the rows that are not SENT, schema version 7)
//     per key, and under BlockFailed one of the dead order index for a
//     dead letter before it, not per row: the keys of the first $1 due rows in due order
//     are probed once each, in a CTE, and looked up in a hashed set; only a
//     row of another key probes its own key. Each probe walks the key's
//     entries from its start, over those of the key's sent events (moved
//     to the history) that VACUUM has not removed yet, so a probe per row had cost a claim of a
//     hot key 80 buffers per row (TestOrderedClaimPlan). Without the
//     filter the rows of a blocked key would be locked and then dropped by
//     the barrier, and a blocked key with a backlog of due rows older than
//     every other row would take the whole LIMIT at every claim: other
//     keys would starve (TestOrderedClaimBlockedBacklogDoesNotStarve).
//     With it, such a backlog costs a pass over its index entries, not a
//     place in the batch. In the typed form the filter and the window
//     also filter on the type (the same walk of the due index as the
//     unordered typed claim), and a head of a type the claim does not
//     take blocks its key too:
//     the run would end before it, and a key waiting for another
//     dispatcher's type (one that is down, or behind) took the limit
//     (TestOrderedClaimTypedHeadOfAnotherType).
//     The probes compare the key as a range of one value, not with "=",
//     and the ordered claims run under typedPlans: on a table whose
//     statistics said one key held most rows, the planner had answered the
//     probes from the seq index, or by a sequential scan, instead.
//   - Locking read. The candidates are locked in due order with FOR
//     UPDATE SKIP LOCKED LIMIT $1, as in the unordered claim (of every
//     type or typed). The filter read the statement's snapshot; the lock
//     reads the newest version of each row and skips a row taken since.
//   - Runs. For each key among the locked candidates, the statement walks
//     the key's blockers in seq order (the order index, from the key's
//     start) for one row more than it locked of that key (and under
//     BlockFailed finds the key's first dead letter not skipped, where the
//     run ends too: a replayed event before a dead one is taken alone,
//     TestOrderedClaimStopsAtADeadLetter), locks the walked
//     rows that are due PENDING and not locked yet (a head that became due
//     after its successors, say a retried head whose successors were
//     released keeping their emit time, and that the LIMIT left out),
//     skipping rows locked elsewhere, and takes the walked rows before the
//     first one it does not hold: a prefix of the key's blockers, from its
//     head. Rows of the key locked beyond the walk are not taken, nor is
//     anything after a row it could not lock; their row locks end with
//     the statement (run the claim in its own transaction, as the
//     dispatcher does, or they last until commit). Locking the left-out
//     rows is what keeps a key moving when its head is due later than its
//     successors: without it such a head, behind more successors than a
//     claim takes, was never claimed and every run of its key was cut to
//     nothing (TestOrderedClaimRuns). The walk and the locks are what make
//     a run safe. Another claimer may take a key's head after this
//     statement's snapshot was taken: the snapshot still shows the head
//     PENDING and due, so the filter lets the key's rows through, but the
//     locking reads do not return the head (skipped while locked, or
//     rechecked and found not PENDING), so the run ends before it and
//     nothing of the key is claimed (TestOrderedClaimStaleSnapshot). A
//     limit, a row that is not due, a row of a type the claim does not take
//     or a row locked elsewhere cuts a run to its prefix. Keys come in the
//     due order of their first candidate and each key's rows in seq order,
//     so the LIMIT, applied last, also keeps prefixes.
//
// With ClaimParams.ByType the unit of order is the pair (order key, event
// type) instead of the key: the head of a pair is its blocker with the
// lowest seq, it holds only the pair's later rows, and a run is a prefix
// of the pair's blockers. The statement is the same with the type carried
// beside the key (column t in each CTE) and an event_type filter on each
// probe of the order index, so no index is added: the order index has no
// type, and a probe for a pair reads the key's entries of other types
// before the pair's head. A claim of 100 rows of type b behind 10,000
// rows of type a of the same key, held by a PROCESSING head, touched
// about 25,000 buffers where the claims of TestOrderedClaimPlan touch 2,000
// to 4,000 (TestOrderedClaimByTypePlan); an emitter that puts the type
// into PartitionKey gets the same scope for nothing.
//
// The head is defined over the rows the statement sees: an event whose
// transaction has not committed yet is not a blocker, even with a lower
// seq than a committed one. Two transactions that emit for the same key
// at once are ordered by commit as the claim finds them, not by seq.
//
// Each claim still walks each claimed key's entries from its start once
// (its head probe and its barrier): the entries of a hot key's sent
// events are read by every claim until VACUUM removes them, so ordered
// claims rely on autovacuum keeping up with the outbox table
// (docs/schema.md, "Storage settings").
//
// An ordered claim returns its rows in due order, except that the rows
// of each key are in seq order (they keep the positions due order gave
// them), and Batch.Keys holds each row's key as the statement read it.
// Its started_at expressions are those of the unordered claim: the first
// Start rows in due order are marked started.
//
// # Fencing
//
// Renew, Start, Complete and Release match each row by id AND token AND
// status PROCESSING, and all but Release also by an unexpired lease
// (lease_until > clock_timestamp(), database clock). A worker whose lease expired, was
// recovered or was re-claimed by someone else therefore changes nothing; the
// statements report the rows they could not touch as lost, and the caller
// reports them as outbox.ErrLockLost.
//
// # Lost replies
//
// A completion can commit while its reply never arrives (a timeout, a
// broken connection). Its caller retries the same write (the same
// outcomes, the same delays), which finds the rows no longer held, and
// then reads them back with Outcomes, one statement per token in one
// round trip, which looks for each row in the outbox table, then in the
// dead letters (primary key), then in the SENT history (its id index, in
// every partition): a moved row carries its outcome_token and attempt
// log, and the rules below read it as they read a row of the outbox
// table, to tell its own recorded outcome from a lease lost before
// the write. The lock token alone cannot: once a retry or a snooze is due,
// another claim overwrites it, possibly before the caller's next try. So
// every completion (SENT, a retry, a snooze, FAILED) also stores its
// claim's token in outcome_token (schema version 9), in the same
// statement (the UPDATE, or the row the move inserts), and nothing else
// writes that column: claims, renewals, recovery and releases leave it
// alone (a release records no outcome, and a recovery's expiry is told
// apart below; a recovery that moves its row to the dead letters keeps
// the row's outcome_token as it was, not the claim's). So outcome_token
// = T proves that claim T recorded an outcome, and that no outcome was recorded after it. A
// later completion by another claim overwrites it; the attempt-log entry
// of a retry or FAILED outcome, and of a recovery of a started attempt,
// carries the claim's token too, and stays (in the window of ten). A
// success and a snooze write no entry.
//
// Outcomes sorts each outcome the caller asked for by what its row shows
// now (the row found first in the outbox table, the dead letters and the
// SENT history), first match wins:
//
//	row                                           asked for           verdict
//	no row in any of the three tables             anything            unknown: a SENT row deleted by DeleteSent (ours or
//	                                                                  another claim's), retention or a purge; nothing tells whose
//	outcome_token = T                             anything            recorded: the outcome asked for (claimed since or not)
//	PROCESSING under lock_token T (lease passed)  anything            lost: nothing was recorded, and now nothing can be
//	log entry of T: recovered, or worker_lost     anything            lost: recovery took the lease before any write of T
//	log entry of T: retry or failed               a retry, FAILED     recorded (a later claim's outcome replaced the token)
//	log entry of T: retry or failed               a success, snooze   unknown (no write of T adds such an entry: defensive)
//	no trace of T                                 a success           lost: a SENT row keeps its outcome_token for good
//	no trace of T                                 a retry, snooze,    unknown: a later claim's outcome may have replaced the
//	                                              FAILED              token of a snooze, or pushed the entry out of the window
//
// A recorded outcome comes back as if the reply had arrived: a retry with
// the attempt number of its log entry and its due time (the entry's end,
// the write's now(), plus the delay), a snooze with the row's attempts and
// next_attempt_at (a later recovery of another claim may have moved it),
// FAILED with the entry's attempt. A verdict "lost" is never given for an
// outcome T wrote; "unknown" says only that the row can no longer tell.
// The caller keeps the first write's delays (a jittered backoff) for its
// retries, so that the entry's end plus the delay is the time it wrote.
// The verdicts read committed rows: they hold once the earlier write has
// ended on the server, which CompleteParams.StatementTimeout bounds (each
// statement of its batch; see "Locks and deadlocks"). A write still
// running then, past its lease, could commit after a "lost" verdict.
//
// During a rolling upgrade a dispatcher of version 8 records outcomes
// without touching outcome_token: a row it completes after claim T's
// outcome still shows T, which is still true of T (it recorded an
// outcome), and T's verdict stays "recorded".
//
// # Recovery
//
// Recover returns a bounded batch of PROCESSING rows whose lease has expired
// to PENDING, due at once, without spending retry budget (attempts is
// unchanged). Only a row whose attempt had started (started_at: set by the
// claim for the rows its caller starts at once, except rows recovered
// before, see Batch.Suspect; else by Start right before the attempt) counts
// a recovery; a row recovered more than the cap allows (a poison event that
// kills its worker every time), or any started row under at-most-once
// delivery, becomes FAILED with code worker_lost and moves to the dead
// letters in the same statement. Recovery finds the expired leases
// through the held index (locked_at, over the PROCESSING rows), in
// locked_at order: it reads at most the held rows, never the backlog, and
// lease_until stays out of every index so that renewals are HOT updates
// (TestRecoverPlanIsProportionalToTheBatch). A row that was claimed
// ahead and never started is returned as it was, keeping its due time, so
// that a worker that dies over and over does not spend the budget of the
// events queued behind the one that kills it. Recovery locks the rows it
// changes with SKIP LOCKED, which checks status and expiry on the newest
// version of each row it locks, so a row completed at the same moment stays
// completed.
//
// # Snooze
//
// A snooze (Failure.Snooze) is written by Complete's statement for failed
// attempts, under the same fence and in the same round trip: the row
// returns to PENDING due at now() + delay, with attempts, its last error
// and its attempt log unchanged and the snoozes counter one higher. It
// takes no other lock and no other path than a retry.
//
// # Locks and deadlocks
//
// Claim, Recover, Renew, Start and Release lock their rows with SKIP
// LOCKED and change only the rows they locked: they never wait for a row
// lock, so they cannot be part of a deadlock. (Like any locking read, they
// may keep the lock of a row whose newer version no longer matches; that
// lock is held by a statement that waits for nothing, so no cycle goes
// through it.) Complete may wait, but its fence reads the clock at each
// row (clock_timestamp() < lease_until), so it never waits on a row whose
// lease has passed, and only such a row can be held under another token.
// Two Completes of the same tokens could still wait on each other, so run
// one at a time per set of tokens (the dispatcher has one completer) and
// bound each with CompleteParams.StatementTimeout, which ends a write on
// the server when its caller gives up on it, before the caller retries.
// Under these rules no two statements of this package wait on each other.
//
// # Time
//
// Every due and expiry comparison, and every timestamp written, uses the
// database's now(). Durations travel as microseconds. now() is the start of
// the transaction, so run these statements in their own short transactions
// (as the dispatcher does, on a pool), not inside a long-lived one.
//
// # Plans
//
// The claim and recovery statements lock their rows in a materialized CTE
// and update them through "id = ANY(ARRAY(SELECT id FROM cte))", so that
// the planner reaches the rows through the primary key: a join to the CTE
// let it hash-join the whole table (measured: a full scan of 20,100 rows
// for a claim of 100). The batch statements join unnest() of the refs on
// the primary key, with an expiry test no index can serve, because the
// generic plan of a prepared statement otherwise scanned the lease index
// (schema version 9; the held index now) and filtered the join: 10s for
// 5,000 rows, against 0.4s. For the same reason recovery's UPDATE and
// DELETE do not repeat the status and expiry test that its CTE made on
// the locked rows: with it, the planner reached the rows through the
// lease index and filtered every expired row by id to recover a batch
// (19,900 rows removed by the filter to recover 100), a cost that grew
// with the number of expired leases rather than with the batch
// (TestRecoverPlanIsProportionalToTheBatch). A move's INSERT reads
// nothing but the rows its DELETE returned.
package lease
