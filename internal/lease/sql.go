package lease

import (
	"fmt"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// statements is the SQL text of one table, built once in New.
type statements struct {
	// claims take due rows of every type, typedClaims those of the types
	// in a text array parameter (ClaimParams.Types).
	claims, typedClaims                                                                  claimForms
	renew, start, sent, deleteSent, failed, recover, release, releaseLater, releaseToken string
	nextDue, typedNextDue, outcomes, waiting                                             string
}

// appendLog is the SQL expression that appends one entry to attempt_log and
// keeps only the latest ten (the table's CHECK allows no more).
func appendLog(entry string) string {
	return `CASE WHEN jsonb_array_length(o.attempt_log) >= 10 THEN o.attempt_log - 0 ELSE o.attempt_log END || jsonb_build_array(` + entry + `)`
}

// logEntry builds the attempt-log object of the current attempt. Its
// token is the claim's lock token: the evidence a completion retried after
// its reply was lost finds of its own retry or FAILED outcome once another
// claim's outcome replaced the row's outcome_token, and of a recovery
// that took its lease first (see Outcomes).
func logEntry(outcome, code, message string) string {
	return fmt.Sprintf(`jsonb_build_object('attempt', o.attempts + 1, 'outcome', %s, 'code', %s, 'message', %s, `+
		`'owner', o.lock_owner, 'started', o.locked_at, 'ended', now(), 'token', o.lock_token)`, outcome, code, message)
}

// fenced is the condition every transition of a held row must meet: $1
// holds the ids and $2 the one token they were claimed with (statements
// are sent per claim token). "id = ANY($1)" reaches the rows through the
// primary key. An unnest() join of (id, token) pairs had made the
// completion of B rows cost O(B²): 227ms at B=1,000.
//
// The expiry test reads clock_timestamp(), the database clock when the row
// is reached, not now() (the start of the transaction). That is what makes
// completions deadlock-free without a separate locking pass: a row whose
// lease has passed by the time a statement reaches it is not a candidate,
// so the statement never waits on it. Recovery only takes rows whose lease
// has passed, and only then can another claimer hold a row this token
// still names; so a fenced statement never waits on a lock held for
// another token, and the only locks it can wait on are those of the
// dispatcher's own other statements (which the dispatcher runs one at a
// time) or of third parties. clock_timestamp() is volatile, so no index
// can serve the test either: the generic plan PostgreSQL switches to after
// five executions of a prepared statement had scanned the lease index
// (10s for 5,000 rows among 50,000 PROCESSING ones; schema version 9, the
// held index now has the same rows).
//
// The status test is written as stillProcessing, not as the held index's
// predicate (the lease index's until schema version 11), for the same reason: with "status = 'PROCESSING'" the planner
// could scan that partial index, which holds every held row of every
// dispatcher, and test each against the whole id array, O(held × B); it
// did so even in custom plans whenever its statistics said few rows were
// PROCESSING (a completion of 1,000 rows, with 3,000 held, compared 1.5M
// uuids).
const fenced = `o.id = ANY (ARRAY(SELECT unnest($1::uuid[]))) AND o.lock_token = $2::uuid AND ` + stillProcessing + ` AND clock_timestamp() < o.lease_until`

// stillProcessing tests that row o is PROCESSING in a form that does not
// imply the held index's predicate, so that statements naming rows by id
// reach them through the primary key and never through that index (see
// fenced).
const stillProcessing = `(o.status || '') = 'PROCESSING'`

// settled ends a row's lease when it leaves PROCESSING.
const settled = `lease_until = NULL, heartbeat_at = NULL`

// recorded ends a row's lease when it leaves PROCESSING with an outcome
// (SENT, a retry, a snooze, FAILED), and stores the claim's token in
// outcome_token (schema version 9), which no claim, renewal, recovery or
// release overwrites: a completion retried after its reply was lost
// recognises its own outcome by it even after another claim took the row
// (see Outcomes). lock_token stays too, for operators and for dispatchers
// of version 8 during a rolling upgrade. No index holds outcome_token, so
// writing it adds no index entry.
const recorded = settled + `, outcome_token = o.lock_token`

// cleared ends a row's lease without an outcome (recovery, release): the
// token and the start mark go too, so the row no longer names any claim.
const cleared = `lock_token = NULL, started_at = NULL, ` + settled

// lockedRefs locks, without waiting, the rows named by $1 (ids) that are
// not locked by another transaction, for Renew, Start and Release; "req"
// are the (id, token) pairs of $1 and $2. A row locked elsewhere is skipped
// and reported busy rather than waited for, so these statements can never
// be part of a deadlock. The ids go through ARRAY(SELECT unnest()) so that
// the planner, not seeing how many there are, reaches them through the
// primary key: with the array itself it chose a sequential scan of the
// table for 3,500 ids among 200,000 rows (124ms against 32ms).
const lockedRefs = `req AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[]) AS r(id, token)
), locked AS MATERIALIZED (
	SELECT id FROM %[1]s WHERE id = ANY (ARRAY(SELECT unnest($1::uuid[]))) FOR NO KEY UPDATE SKIP LOCKED
)`

// refResults reports, after a lockedRefs statement whose data-modifying
// CTE "changed" returns (id, lock_token), every changed ref (true) and
// every busy ref (false): one whose row exists but was locked elsewhere.
// The rows that exist are read through the primary key, as lockedRefs
// reads them, and the busy ones are those EXCEPT the locked ones (a set
// operation, not a test per ref): with "NOT EXISTS (locked) AND EXISTS
// (… WHERE b.id = r.id)" the planner made a semi join of a sequential
// scan of the whole table (128,000 rows for a renewal of 3,000, on a
// table of PENDING rows) and an anti join that compared every ref with
// every locked row (4.5M comparisons, 3s;
// TestHeldRowStatementsUseThePrimaryKey).
const refResults = `SELECT id, lock_token, true FROM changed
UNION ALL
SELECT r.id, r.token, false FROM req AS r
JOIN (SELECT b.id FROM %[1]s AS b WHERE b.id = ANY (ARRAY(SELECT unnest($1::uuid[])))
	EXCEPT SELECT l.id FROM locked AS l) AS b ON b.id = r.id`

// recoverStarted is true for a recovered row whose attempt had started:
// only those spend the poison budget (recoveries) or can be FAILED. A row
// claimed ahead and never started is returned as it was.
const recoverStarted = `o.started_at IS NOT NULL`

// recoverFinal decides, on the locked row version, whether a recovered row
// is FAILED: its attempt started, and at-most-once ($3) is on or it is past
// the recovery cap ($2).
const recoverFinal = `(` + recoverStarted + ` AND ($3::bool OR o.recoveries + 1 > $2::int))`

// eventColumns are an event's columns of the row named alias, in the order
// eventTargets reads them.
func eventColumns(alias string) string {
	return strings.ReplaceAll(`c.id, c.event_type, coalesce(c.aggregate_type, ''), coalesce(c.aggregate_id, ''),
	coalesce(c.partition_key, ''), coalesce(c.idempotency_key, ''), coalesce(c.content_type, ''),
	c.payload, c.headers, c.attempts, c.snoozes, c.created_at`, "c.", alias+".")
}

// claimedColumns is what Claim returns for each row, in scan order: the
// event, the lease and the order key. The UPDATE returns them itself, in
// no particular order; Claim sorts them. Returning o.* from a CTE and
// sorting in an outer SELECT made the claim of 1,000 rows take about
// 11.8ms instead of 10.4ms.
var claimedColumns = eventColumns("o") + `, o.lease_until, o.next_attempt_at, o.seq, o.started_at IS NOT NULL, o.recoveries > 0`

// claimSQL is the claim statement with the given started_at expression,
// taking its rows from due (see allDue): a locking SELECT of the ids of up
// to $1 due PENDING rows in due order. ARRAY() keeps the order the CTE
// locked the rows in.
func claimSQL(t, startedAt, due string) string {
	return fmt.Sprintf(`WITH due AS MATERIALIZED (
	%[4]s
), ids AS MATERIALIZED (
	SELECT ARRAY(SELECT id FROM due) AS a
)
UPDATE %[1]s AS o
SET status = 'PROCESSING', lock_token = $2, lock_owner = $3, locked_at = now(), heartbeat_at = now(),
	lease_until = now() + $4::bigint * interval '1 microsecond',
	started_at = %[3]s
WHERE o.id = ANY ((SELECT a FROM ids)::uuid[])
RETURNING %[2]s`, t, claimedColumns, startedAt, due)
}

// The started_at expressions of the three forms of the claim, by how many
// of its rows are marked started (the dispatcher starts them at once):
// none, all, or the first $5 in claim order. Only the last compares each
// row with the marked ids: for a whole batch that made the claim O(B²),
// 13% of dispatch throughput at B=1,000. A suspect (a row recovered
// before, see Batch.Suspect) is never marked by a claim, whichever rows
// the claim takes.
const (
	startNone = `NULL`
	startAll  = `CASE WHEN o.recoveries = 0 THEN now() END`
	startSome = `CASE WHEN o.recoveries = 0 AND o.id = ANY ((SELECT a[1:$5::int] FROM ids)::uuid[]) THEN now() END`
)

// allDue locks the due rows, walking the due index from its head, but
// for those skip leaves out (see skipped). With typesParam > 0 (the
// position of a text array parameter) it takes only rows of those types:
// a filter on the same walk, so that a claim of some types costs what a
// claim of every type costs, whatever their number (one form for every
// dispatcher, schema version 11; the rows of other types it passes over
// are its cost, see the package doc).
func allDue(t string, typesParam, skip int) string {
	return fmt.Sprintf(`SELECT id FROM %[1]s
	WHERE status = 'PENDING' AND next_attempt_at <= now() AND %[2]s%[3]s
	ORDER BY next_attempt_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED`, t, skipped("", skip), ofTypes("", typesParam))
}

// skipped is the condition on the row named alias ("" for none) that
// leaves out the ids of the uuid[] parameter $skip (ClaimParams.Skip) and,
// when the bool parameter after it is true, suspects
// (ClaimParams.SkipSuspects).
func skipped(alias string, skip int) string {
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf(`%[1]sid <> ALL ($%[2]d::uuid[]) AND (%[1]srecoveries = 0 OR NOT $%[3]d::bool)`, alias, skip, skip+1)
}

// ofTypes is, in the typed form (typesParam > 0), the condition that the
// row named alias ("" for none) is of a claimed type, after an AND; else
// empty.
func ofTypes(alias string, typesParam int) string {
	if typesParam == 0 {
		return ``
	}
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf(` AND %sevent_type = ANY ($%d::text[])`, alias, typesParam)
}

// claimForms are the three forms of a claim: none, all or some of its
// rows marked started.
type claimForms struct{ none, all, some string }

// buildClaims builds the claim of every type, or (typed) of the types in
// the text array after the started count: $5 ($6 in the claimSome form,
// which has one parameter more), the ids to skip and SkipSuspects
// following (see skipped).
func buildClaims(t string, typed bool) claimForms {
	due := func(param int) string {
		if typed {
			return allDue(t, param, param+1)
		}
		return allDue(t, 0, param)
	}
	return claimForms{
		none: claimSQL(t, startNone, due(5)),
		all:  claimSQL(t, startAll, due(5)),
		some: claimSQL(t, startSome, due(6)),
	}
}

// nextDueSQL is the wait, in microseconds, until the time the query
// returns.
func nextDueSQL(query string) string {
	return `SELECT (extract(epoch FROM (` + query + `) - now()) * 1000000)::bigint`
}

// nextDueWindow bounds the entries of the due index that the next due
// time of some types reads in each of its two walks (typedNextDueSQL).
const nextDueWindow = 1000

// typedNextDueSQL is the next due time of the types of the text array
// $1: the earliest PENDING row of those types among the first
// nextDueWindow entries of the due index, else among the first
// nextDueWindow entries of the rows not due yet (the index from now() on:
// retries, snoozes and delayed events), else none. Each walk stops at
// its first row of the types (the rows are in due order), so it costs
// nextDueWindow entries at most; a row of the types that neither window
// holds (behind more than nextDueWindow rows of other types) is found by
// the next poll instead, or by the next claim, which walks all due rows.
// The second walk runs only when the first finds nothing (coalesce).
func typedNextDueSQL(t string) string {
	walk := func(cond string) string {
		return fmt.Sprintf(`(SELECT w.next_attempt_at FROM (
		SELECT next_attempt_at, seq, event_type FROM %[1]s WHERE status = 'PENDING'%[2]s
		ORDER BY next_attempt_at, seq LIMIT %[3]d
	) AS w WHERE w.event_type = ANY ($1::text[]) ORDER BY w.next_attempt_at, w.seq LIMIT 1)`, t, cond, nextDueWindow)
	}
	return nextDueSQL(`SELECT coalesce(` + walk(``) + `,
	` + walk(` AND next_attempt_at > now()`) + `)`)
}

func buildStatements(names sqlname.Names) statements {
	t := names.Qualified
	// x is the failures of the failed statement, one row per id.
	const x = `unnest($1::uuid[], $3::text[], $4::text[], $5::bool[], $6::bigint[], $7::bool[])
	AS x(id, code, message, final, delay, snooze)`
	return statements{
		claims:       buildClaims(t, false),
		typedClaims:  buildClaims(t, true),
		typedNextDue: typedNextDueSQL(t),

		// start marks held rows started, fenced like a completion but
		// without waiting for a row lock (see lockedRefs).
		start: fmt.Sprintf(`WITH `+lockedRefs+`, changed AS (
	UPDATE %[1]s AS o
	SET started_at = now()
	FROM req AS x
	WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND o.id = x.id AND o.lock_token = x.token
		AND `+stillProcessing+` AND clock_timestamp() < o.lease_until
	RETURNING o.id, o.lock_token
)
`+refResults, t),

		// renew changes lease_until and heartbeat_at, which no index of
		// the table holds (schema version 11): a HOT update, which adds
		// no index entry when the page has room.
		renew: fmt.Sprintf(`WITH `+lockedRefs+`, changed AS (
	UPDATE %[1]s AS o
	SET lease_until = now() + $3::bigint * interval '1 microsecond', heartbeat_at = now()
	FROM req AS x
	WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND o.id = x.id AND o.lock_token = x.token
		AND `+stillProcessing+` AND clock_timestamp() < o.lease_until
	RETURNING o.id, o.lock_token
)
`+refResults, t),

		// sent moves succeeded rows into the SENT history. A successful
		// attempt adds no attempt-log entry: lock_owner, locked_at,
		// sent_at and attempts already say who, when and which attempt,
		// and building the jsonb entry made the completion of 1,000 rows
		// take 14ms instead of 8ms.
		sent: `WITH ` + deleted("m", t, "", fenced, with(leaseEnded(), map[string]string{
			"status": `'SENT'`, "sent_at": `now()`, "attempts": `o.attempts + 1`,
		})) + `, ` + inserted("moved", names.Sent, "m", "id") + `
SELECT id FROM moved`,

		deleteSent: fmt.Sprintf(`DELETE FROM %[1]s AS o
WHERE %[2]s
RETURNING o.id`, t, fenced),

		// failed records failed attempts and snoozes. A retry or a
		// snooze stays in the table: a snoozed row (x.snooze, never
		// x.final) returns to PENDING due at now() + delay with its
		// attempts, error and attempt log unchanged and one more snooze;
		// it goes through the same fenced statement as a retry, so it
		// takes no other path and no other lock order. The log keeps
		// failures only, so that a handler that snoozes often does not
		// push them out of its window of ten. A final failure moves its
		// row to the dead letters (DELETE … INSERT) in the same
		// statement: each row is touched by one of the two (final or
		// not), and both return (id, status, attempts, next_attempt_at).
		failed: fmt.Sprintf(`WITH retried AS (
	UPDATE %[1]s AS o
	SET status = 'PENDING',
		attempts = o.attempts + CASE WHEN x.snooze THEN 0 ELSE 1 END,
		snoozes = o.snoozes + CASE WHEN x.snooze THEN 1 ELSE 0 END,
		next_attempt_at = now() + x.delay * interval '1 microsecond',
		failed_at = NULL,
		last_error_code = CASE WHEN x.snooze THEN o.last_error_code ELSE x.code END,
		last_error = CASE WHEN x.snooze THEN o.last_error ELSE left(x.message, 2048) END, %[2]s,
		attempt_log = CASE WHEN x.snooze THEN o.attempt_log ELSE %[3]s END
	FROM %[5]s
	WHERE %[4]s AND o.id = x.id AND NOT x.final
	RETURNING o.id, o.status, o.attempts, o.next_attempt_at
), %[6]s, %[7]s
SELECT id, status, attempts, next_attempt_at FROM retried
UNION ALL
SELECT id, status, attempts, next_attempt_at FROM moved`, t, recorded,
			appendLog(logEntry(`'retry'`, `x.code`, `left(x.message, 512)`)), fenced, x,
			deleted("dead", t, x, fenced+` AND o.id = x.id AND x.final`, with(leaseEnded(), map[string]string{
				"status": `'FAILED'`, "attempts": `o.attempts + 1`, "failed_at": `now()`,
				"last_error_code": `x.code`, "last_error": `left(x.message, 2048)`,
				"attempt_log": appendLog(logEntry(`'failed'`, `x.code`, `left(x.message, 512)`)),
			})),
			deadInserted("moved", names.Dead, "dead", "id, status, attempts, next_attempt_at")),

		// recover returns the columns the outer SELECT reads, not o.*:
		// o.* would need SELECT on every column of the table (ReadColumns).
		//
		// The expired rows are found through the held index, which holds
		// the PROCESSING rows in locked_at order: the walk tests each
		// held row's lease and stops at $1 expired ones, so it reads at
		// most the held rows, which the dispatchers' configurations bound
		// (BatchSize and the claims ahead), never the PENDING backlog. In
		// locked_at order, not lease_until: lease_until is not indexed
		// (a renewal would then not be a HOT update), and an order by it
		// sorted every expired lease to recover a batch.
		//
		// The UPDATE and the DELETE do not repeat expired's conditions:
		// the CTE checked them on the version it locked (the newest), and
		// the lock keeps it so. Repeated, they let the planner reach the
		// rows through the index and filter every expired row by id, a
		// cost that grows with the expired rows, not the batch. A row that
		// becomes FAILED (recoverFinal) moves to the dead letters; the
		// others stay, each row touched by one of the two. Neither writes
		// outcome_token: a recovery records no outcome of the claim (see
		// Outcomes).
		recover: fmt.Sprintf(`WITH expired AS MATERIALIZED (
	SELECT id FROM %[1]s
	WHERE status = 'PROCESSING' AND lease_until <= now()
	ORDER BY locked_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), recovered AS (
	UPDATE %[1]s AS o
	SET status = 'PENDING',
		recoveries = o.recoveries + CASE WHEN %[5]s THEN 1 ELSE 0 END,
		next_attempt_at = CASE WHEN %[5]s THEN now() ELSE o.next_attempt_at END,
		failed_at = NULL,
		last_error_code = CASE WHEN %[5]s THEN 'worker_lost' ELSE o.last_error_code END,
		last_error = CASE WHEN %[5]s THEN '`+recoveredMessage+`' ELSE o.last_error END,
		attempt_log = CASE WHEN %[5]s THEN %[3]s ELSE o.attempt_log END, %[2]s
	WHERE o.id = ANY (ARRAY(SELECT id FROM expired)) AND NOT %[6]s
	RETURNING o.status, %[4]s
), %[7]s, %[8]s
SELECT c.status, %[9]s FROM recovered AS c
UNION ALL
SELECT c.status, %[9]s FROM moved AS c`, t, cleared,
			appendLog(logEntry(`'recovered'`, `'worker_lost'`, `'lease expired'`)), recoveredColumns("o"),
			recoverStarted, recoverFinal,
			deleted("dead", t, "", `o.id = ANY (ARRAY(SELECT id FROM expired)) AND `+recoverFinal, map[string]string{
				"status": `'FAILED'`, "recoveries": `o.recoveries + 1`, "next_attempt_at": `now()`, "failed_at": `now()`,
				"last_error_code": `'worker_lost'`, "last_error": `'` + recoveredMessage + `'`,
				"attempt_log": appendLog(logEntry(`'failed'`, `'worker_lost'`, `'lease expired'`)),
				"lock_token":  `NULL::uuid`, "started_at": `NULL::timestamptz`, "lease_until": `NULL::timestamptz`, "heartbeat_at": `NULL::timestamptz`,
			}),
			deadInserted("moved", names.Dead, "dead", "status, "+recoveredColumns("")), eventColumns("c")),

		nextDue: nextDueSQL(fmt.Sprintf(`SELECT next_attempt_at FROM %[1]s WHERE status = 'PENDING' ORDER BY next_attempt_at, seq LIMIT 1`, t)),

		waiting: waitingSQL(t),

		release: fmt.Sprintf(`WITH `+lockedRefs+`, changed AS (
	UPDATE %[1]s AS o
	SET status = 'PENDING', %[2]s
	FROM req AS x
	WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND o.id = x.id AND o.lock_token = x.token
		AND `+stillProcessing+`
	RETURNING o.id, x.token AS lock_token
)
`+refResults, t, cleared),

		// releaseLater is release with a back-off: the row is due again
		// at now() + a tenth of its age, at least $3 and at most $4
		// microseconds (see ReleaseLater).
		releaseLater: fmt.Sprintf(`WITH `+lockedRefs+`, changed AS (
	UPDATE %[1]s AS o
	SET status = 'PENDING', %[2]s,
		next_attempt_at = now() + least($4::bigint * interval '1 microsecond',
			greatest($3::bigint * interval '1 microsecond', (now() - o.created_at) / 10))
	FROM req AS x
	WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND o.id = x.id AND o.lock_token = x.token
		AND `+stillProcessing+`
	RETURNING o.id, x.token AS lock_token
)
`+refResults, t, cleared),

		outcomes: outcomesSQL(names),

		// releaseToken finds the rows by token through the held index,
		// which holds only the PROCESSING rows (the held rows of every
		// dispatcher), never the backlog.
		releaseToken: fmt.Sprintf(`UPDATE %[1]s AS o
SET status = 'PENDING', %[2]s
WHERE o.status = 'PROCESSING' AND o.lock_token = $1`, t, cleared),
	}
}

// recoveredMessage is the last_error of a row whose lease recovery took.
const recoveredMessage = `lease expired: the worker stopped renewing it`

// recoveredColumns are the columns of a recovered row that the outer
// SELECT of recover reads (eventColumns), of the row named alias ("" for
// none).
func recoveredColumns(alias string) string {
	cols := []string{"id", "event_type", "aggregate_type", "aggregate_id", "partition_key",
		"idempotency_key", "content_type", "payload", "headers", "attempts", "snoozes", "created_at"}
	if alias != "" {
		for i, c := range cols {
			cols[i] = alias + "." + c
		}
	}
	return strings.Join(cols, ", ")
}

// outcomesSQL reads what each row of $1 shows of an outcome written
// under token $2 (see Outcomes and the package doc, "Lost replies"),
// looking for the row in the outbox table, then in the dead letters (by
// their primary key), then in the SENT history (by its id index, in each
// partition). An id can be in more than one of them (a caller emitted
// an event again with the id of a dead letter or a sent event): the row
// that shows $2's outcome is the row, then the one still held under $2,
// then one whose attempt log names $2, then the first found in that
// order. Taking the first found alone read an older dead letter of the
// id, not the history row that recorded $2's success, and reported the
// success lost. GONE, no row anywhere;
// RECORDED, its outcome_token is $2; HELD, still PROCESSING under $2 (its
// lease passed); else what the latest attempt-log entry under $2 says:
// RECOVERED (a recovery took the lease), LOGGED (a retry or FAILED
// outcome of $2), or NO_TRACE when there is none. Then the row's attempts
// and due time, and the entry's attempt and end.
func outcomesSQL(names sqlname.Names) string {
	const cols = `h.id, h.status, h.lock_token, h.outcome_token, h.attempts, h.next_attempt_at, h.attempt_log`
	return fmt.Sprintf(`SELECT x.id,
	CASE WHEN o.id IS NULL THEN 'GONE'
		WHEN o.outcome_token = $2::uuid THEN 'RECORDED'
		WHEN o.lock_token = $2::uuid AND `+stillProcessing+` THEN 'HELD'
		WHEN l.entry IS NULL THEN 'NO_TRACE'
		WHEN l.entry->>'outcome' = 'recovered' OR l.entry->>'code' = 'worker_lost' THEN 'RECOVERED'
		ELSE 'LOGGED' END,
	coalesce(o.attempts, 0), coalesce(o.next_attempt_at, now()),
	(l.entry->>'attempt')::int, (l.entry->>'ended')::timestamptz
FROM unnest($1::uuid[]) AS x(id)
LEFT JOIN LATERAL (
	SELECT * FROM (
		SELECT %[4]s, 1 AS t FROM %[1]s AS h WHERE h.id = x.id
		UNION ALL
		SELECT %[4]s, 2 FROM %[2]s AS h WHERE h.id = x.id
		UNION ALL
		SELECT %[4]s, 3 FROM %[3]s AS h WHERE h.id = x.id
	) AS h
	ORDER BY h.outcome_token IS NOT DISTINCT FROM $2::uuid DESC,
		(h.lock_token IS NOT DISTINCT FROM $2::uuid AND h.status = 'PROCESSING') DESC,
		h.attempt_log @> jsonb_build_array(jsonb_build_object('token', $2::uuid::text)) DESC, h.t
	LIMIT 1
) AS o ON true
LEFT JOIN LATERAL (
	SELECT e.entry FROM jsonb_array_elements(o.attempt_log) WITH ORDINALITY AS e(entry, n)
	WHERE e.entry->>'token' = $2::uuid::text
	ORDER BY e.n DESC LIMIT 1
) AS l ON true`, names.Qualified, names.Dead, names.Sent, cols)
}

// maxWaitingRows bounds the entries of the due index that Waiting reads.
const maxWaitingRows = 10000

// waitingSQL counts, per event type not in $1, the PENDING rows due for
// at least $2 microseconds, up to $3 per type, for at most $4 types (the
// first in type order), among the rows that have been due longest: it
// walks the due index from its head over the rows due for at least $2,
// up to $3 × $4 entries and at most maxWaitingRows, and groups them by
// type. Its cost is bounded by those entries whatever the backlog; a type
// whose rows all wait behind that many older rows of other types goes
// uncounted until those are claimed. The rows of the caller's own types
// take places in the walk, but the caller claims them soon after they
// are due: those that have waited $2 are few.
func waitingSQL(t string) string {
	return fmt.Sprintf(`SELECT w.event_type, least(count(*), $3::int) FROM (
	SELECT event_type FROM %[1]s
	WHERE status = 'PENDING' AND next_attempt_at <= now() - $2::bigint * interval '1 microsecond'
	ORDER BY next_attempt_at, seq
	LIMIT least($3::bigint * $4::bigint, %[2]d)
) AS w
WHERE w.event_type <> ALL ($1::text[])
GROUP BY w.event_type
ORDER BY w.event_type
LIMIT $4::int`, t, maxWaitingRows)
}
