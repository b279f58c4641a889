package lease

import (
	"fmt"
	"strings"
)

// statements is the SQL text of one table, built once in New.
type statements struct {
	claims                                                                                                           claimForms
	renew, start, sent, deleteSent, failed, recover, release, releaseLater, releaseToken, nextDue, outcomes, waiting string
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
// (10s for 5,000 rows among 50,000 PROCESSING ones).
//
// The status test is written as stillProcessing, not as the lease index's
// predicate, for the same reason: with "status = 'PROCESSING'" the planner
// could scan that partial index, which holds every held row of every
// dispatcher, and test each against the whole id array, O(held × B); it
// did so even in custom plans whenever its statistics said few rows were
// PROCESSING (a completion of 1,000 rows, with 3,000 held, compared 1.5M
// uuids).
const fenced = `o.id = ANY (ARRAY(SELECT unnest($1::uuid[]))) AND o.lock_token = $2::uuid AND ` + stillProcessing + ` AND clock_timestamp() < o.lease_until`

// stillProcessing tests that row o is PROCESSING in a form that does not
// imply the lease index's predicate, so that statements naming rows by id
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
const refResults = `SELECT id, lock_token, true FROM changed
UNION ALL
SELECT r.id, r.token, false FROM req AS r
WHERE NOT EXISTS (SELECT 1 FROM locked AS l WHERE l.id = r.id) AND EXISTS (SELECT 1 FROM %[1]s AS b WHERE b.id = r.id)`

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
// taking its rows from due (allDue or typedDue): a locking SELECT of the
// ids of up to $1 due PENDING rows in due order. ARRAY() keeps the order
// the CTE locked the rows in.
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

// allDue locks the due rows of every type, walking the due index from its
// head, but for those skip leaves out (see skipped).
func allDue(t string, skip int) string {
	return fmt.Sprintf(`SELECT id FROM %[1]s
	WHERE status = 'PENDING' AND next_attempt_at <= now() AND %[2]s
	ORDER BY next_attempt_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED`, t, skipped("", skip))
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

// typeLegSlack is how many rows locked by other claimers one type's leg
// of a typed claim can skip before it runs dry: a leg offers at most $1
// (the batch) plus this many rows. The legs are read lazily, so this is
// not what a claim reads; it is the LIMIT that makes PostgreSQL plan each
// leg as a subquery of its own, in which event_type = constant lets the
// type due index give due order, and plan it for a few rows (an ordered
// index scan) rather than for all the rows of its type (with no LIMIT, or
// a LIMIT of a million, it read and sorted all 20,000 due rows of one
// type for a claim of 100). A claim whose legs run dry because more rows
// were locked elsewhere takes fewer rows; the next claim takes the rest.
const typeLegSlack = 1000

// pendingForTypes is the type due index's predicate, written as the
// index has it: the typed statements repeat it so that the planner can
// take that index and no other (see migrations/006_type_due_index.sql).
const pendingForTypes = `(status || '') = 'PENDING'`

// typeLegs is one leg per event type ($param[1] to $param[n]): columns of
// that type's PENDING rows that match due, in due order, up to limit,
// read from the type due index, to be merged by a Merge Append into one
// stream in due order.
func typeLegs(t string, n, param int, columns, due, limit string) string {
	legs := make([]string, n)
	for i := range legs {
		legs[i] = fmt.Sprintf(`(SELECT %[4]s FROM %[1]s
		WHERE %[7]s AND event_type = ($%[2]d::text[])[%[3]d]%[5]s
		ORDER BY next_attempt_at, seq LIMIT %[6]s)`, t, param, i+1, columns, due, limit, pendingForTypes)
	}
	return strings.Join(legs, "\n\t\tUNION ALL\n\t\t")
}

// typedDue locks the due rows of n event types, given as the text array
// $param: one leg per type (see typeLegs) merged in due order, each row
// then locked on the table itself, skipping rows locked elsewhere, until
// $1 are locked. The lock cannot sit in the legs (no row lock is allowed
// over a UNION) nor in each leg (each would lock up to $1 rows), so the
// rows are reached again by ctid, a TID scan: the ctid of a row version
// visible to the statement stays valid while the statement runs. A row
// changed since its leg read it is skipped by this claim (the TID
// recheck rejects the newer version), or locked in its newest version and
// the WHERE on "o" checked against it again (as in allDue), depending on
// the server: either way it is never claimed unless it is still a due
// PENDING row, and a skipped row is taken by the next claim. A join on id instead read
// the primary key for each row: 510 buffers for a claim of 100, against
// 210. A backlog of other types is never read: each leg starts at its own
// type in the type due index. What skip leaves out is not locked (see
// skipped).
func typedDue(t string, n, param, skip int) string {
	return fmt.Sprintf(`SELECT o.id FROM (
		%[2]s
	) AS c JOIN %[1]s AS o ON o.ctid = c.tid
	WHERE o.status = 'PENDING' AND o.next_attempt_at <= now() AND %[3]s
	ORDER BY c.next_attempt_at, c.seq
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED`, t, typeLegs(t, n, param, `ctid AS tid, next_attempt_at, seq`, ` AND next_attempt_at <= now()`,
		fmt.Sprintf(`$1::int + %d`, typeLegSlack)), skipped("o", skip))
}

// claimForms are the three forms of a claim from one source of due rows;
// due gets the position of its type array parameter, for typedDue (the
// claimSome form has one parameter more), and of the ids to skip, the
// last but one parameter (after the types when typed; see skipped).
type claimForms struct{ none, all, some string }

func buildClaims(t string, typed bool, due func(param, skip int) string) claimForms {
	skip := func(param int) int {
		if typed {
			return param + 1
		}
		return param
	}
	return claimForms{
		none: claimSQL(t, startNone, due(5, skip(5))),
		all:  claimSQL(t, startAll, due(5, skip(5))),
		some: claimSQL(t, startSome, due(6, skip(6))),
	}
}

// typedStatements are the statements of a dispatcher that claims only n
// event types: its claims, and its next due time.
type typedStatements struct {
	claims  claimForms
	nextDue string
}

func buildTyped(t string, n int) typedStatements {
	return typedStatements{
		claims:  buildClaims(t, true, func(param, skip int) string { return typedDue(t, n, param, skip) }),
		nextDue: nextDueSQL(`SELECT min(next_attempt_at) FROM (` + typeLegs(t, n, 1, `next_attempt_at, seq`, ``, `1`) + `) AS c`),
	}
}

// nextDueSQL is the wait, in microseconds, until the time the query
// returns.
func nextDueSQL(query string) string {
	return `SELECT (extract(epoch FROM (` + query + `) - now()) * 1000000)::bigint`
}

func buildStatements(t string) statements {
	return statements{
		claims: buildClaims(t, false, func(_, skip int) string { return allDue(t, skip) }),

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

		renew: fmt.Sprintf(`WITH `+lockedRefs+`, changed AS (
	UPDATE %[1]s AS o
	SET lease_until = now() + $3::bigint * interval '1 microsecond', heartbeat_at = now()
	FROM req AS x
	WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND o.id = x.id AND o.lock_token = x.token
		AND `+stillProcessing+` AND clock_timestamp() < o.lease_until
	RETURNING o.id, o.lock_token
)
`+refResults, t),

		// A successful attempt adds no attempt-log entry: lock_owner,
		// locked_at, sent_at and attempts already say who, when and which
		// attempt, and building the jsonb entry made the completion of
		// 1,000 rows take 14ms instead of 8ms.
		sent: fmt.Sprintf(`UPDATE %[1]s AS o
SET status = 'SENT', sent_at = now(), attempts = o.attempts + 1, %[2]s
WHERE %[3]s
RETURNING o.id`, t, recorded, fenced),

		deleteSent: fmt.Sprintf(`DELETE FROM %[1]s AS o
WHERE %[2]s
RETURNING o.id`, t, fenced),

		// failed records failed attempts and snoozes. A snoozed row
		// (x.snooze, never x.final) returns to PENDING due at now() +
		// delay with its attempts, error and attempt log unchanged and
		// one more snooze: it goes through the same fenced statement as
		// a retry, so it takes no other path and no other lock order.
		// The log keeps failures only, so that a handler that snoozes
		// often does not push them out of its window of ten.
		failed: fmt.Sprintf(`UPDATE %[1]s AS o
SET status = CASE WHEN x.final THEN 'FAILED' ELSE 'PENDING' END,
	attempts = o.attempts + CASE WHEN x.snooze THEN 0 ELSE 1 END,
	snoozes = o.snoozes + CASE WHEN x.snooze THEN 1 ELSE 0 END,
	next_attempt_at = CASE WHEN x.final THEN o.next_attempt_at
		ELSE now() + x.delay * interval '1 microsecond' END,
	failed_at = CASE WHEN x.final THEN now() END,
	last_error_code = CASE WHEN x.snooze THEN o.last_error_code ELSE x.code END,
	last_error = CASE WHEN x.snooze THEN o.last_error ELSE left(x.message, 2048) END, %[2]s,
	attempt_log = CASE WHEN x.snooze THEN o.attempt_log ELSE %[3]s END
FROM unnest($1::uuid[], $3::text[], $4::text[], $5::bool[], $6::bigint[], $7::bool[])
	AS x(id, code, message, final, delay, snooze)
WHERE %[4]s AND o.id = x.id
RETURNING o.id, o.status, o.attempts, o.next_attempt_at`, t, recorded,
			appendLog(logEntry(`CASE WHEN x.final THEN 'failed' ELSE 'retry' END`, `x.code`, `left(x.message, 512)`)), fenced),

		// recovered returns the columns the outer SELECT reads, not o.*:
		// o.* would need SELECT on every column of the table (ReadColumns).
		//
		// The UPDATE does not repeat expired's conditions: the CTE
		// checked them on the version it locked (the newest), and the
		// lock keeps it so. Repeated, they let the planner reach the
		// rows through the lease index and filter every expired row by
		// id, a cost that grows with the expired rows, not the batch.
		recover: fmt.Sprintf(`WITH expired AS MATERIALIZED (
	SELECT id FROM %[1]s
	WHERE status = 'PROCESSING' AND lease_until <= now()
	ORDER BY lease_until
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), recovered AS (
	UPDATE %[1]s AS o
	SET status = CASE WHEN %[4]s THEN 'FAILED' ELSE 'PENDING' END,
		recoveries = o.recoveries + CASE WHEN %[6]s THEN 1 ELSE 0 END,
		next_attempt_at = CASE WHEN %[6]s THEN now() ELSE o.next_attempt_at END,
		failed_at = CASE WHEN %[4]s THEN now() END,
		last_error_code = CASE WHEN %[6]s THEN 'worker_lost' ELSE o.last_error_code END,
		last_error = CASE WHEN %[6]s THEN 'lease expired: the worker stopped renewing it' ELSE o.last_error END,
		attempt_log = CASE WHEN %[6]s THEN %[3]s ELSE o.attempt_log END, %[2]s
	WHERE o.id = ANY (ARRAY(SELECT id FROM expired))
	RETURNING o.status, o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.partition_key,
		o.idempotency_key, o.content_type, o.payload, o.headers, o.attempts, o.snoozes, o.created_at
)
SELECT c.status, %[5]s FROM recovered AS c`, t, cleared,
			appendLog(logEntry(`CASE WHEN `+recoverFinal+` THEN 'failed' ELSE 'recovered' END`, `'worker_lost'`, `'lease expired'`)),
			recoverFinal, eventColumns("c"), recoverStarted),

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

		// outcomes reads what each row of $1 shows of an outcome written
		// under token $2 (see Outcomes and the package doc, "Lost
		// replies"): GONE, no row; RECORDED, its outcome_token is $2;
		// HELD, still PROCESSING under $2 (its lease passed); else what
		// the latest attempt-log entry under $2 says: RECOVERED (a
		// recovery took the lease), LOGGED (a retry or FAILED outcome of
		// $2), or NO_TRACE when there is none. Then the row's attempts
		// and due time, and the entry's attempt and end.
		outcomes: fmt.Sprintf(`SELECT x.id,
	CASE WHEN o.id IS NULL THEN 'GONE'
		WHEN o.outcome_token = $2::uuid THEN 'RECORDED'
		WHEN o.lock_token = $2::uuid AND `+stillProcessing+` THEN 'HELD'
		WHEN l.entry IS NULL THEN 'NO_TRACE'
		WHEN l.entry->>'outcome' = 'recovered' OR l.entry->>'code' = 'worker_lost' THEN 'RECOVERED'
		ELSE 'LOGGED' END,
	coalesce(o.attempts, 0), coalesce(o.next_attempt_at, now()),
	(l.entry->>'attempt')::int, (l.entry->>'ended')::timestamptz
FROM unnest($1::uuid[]) AS x(id)
LEFT JOIN %[1]s AS o ON o.id = x.id
LEFT JOIN LATERAL (
	SELECT e.entry FROM jsonb_array_elements(o.attempt_log) WITH ORDINALITY AS e(entry, n)
	WHERE e.entry->>'token' = $2::uuid::text
	ORDER BY e.n DESC LIMIT 1
) AS l ON true`, t),

		releaseToken: fmt.Sprintf(`UPDATE %[1]s AS o
SET status = 'PENDING', %[2]s
WHERE o.status = 'PROCESSING' AND o.lock_token = $1`, t, cleared),
	}
}

// waitingSQL counts, per event type not in $1, the PENDING rows due for
// at least $2 microseconds, up to $3 per type. It walks the distinct
// types of the PENDING rows through the type due index, one index probe
// per type (at most $4 types), and counts only the types not in $1, each
// in a range scan of that index that stops at $3 rows: its cost is
// bounded by $4 probes plus $3 rows per type it reports, whatever the
// backlog.
func waitingSQL(t string) string {
	return fmt.Sprintf(`WITH RECURSIVE types(event_type, n) AS (
	SELECT (SELECT min(event_type) FROM %[1]s WHERE %[2]s), 1
	UNION ALL
	SELECT (SELECT min(x.event_type) FROM %[1]s AS x WHERE %[2]s AND x.event_type > types.event_type),
		types.n + 1
	FROM types WHERE types.event_type IS NOT NULL AND types.n < $4::int
)
SELECT types.event_type, w.n FROM types CROSS JOIN LATERAL (
	SELECT count(*) FROM (
		SELECT 1 FROM %[1]s AS x
		WHERE %[2]s AND x.event_type = types.event_type AND types.event_type <> ALL ($1::text[])
			AND x.next_attempt_at <= now() - $2::bigint * interval '1 microsecond'
		LIMIT $3::int
	) AS d
) AS w(n)
WHERE w.n > 0
ORDER BY types.event_type`, t, pendingForTypes)
}
