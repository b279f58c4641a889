package admin

import (
	"fmt"
	"strings"
)

// statements is the SQL text for one outbox table, built once by New.
type statements struct {
	counts, summary, inspect, notify string
	pendingByType, blocked           string
	blockedByType                    string
	// dueBlocked is Counts.DueBlocked's part of counts and summary on its
	// own (for the plan tests).
	dueBlocked      string
	replayIDs, skip write
}

// write is a bulk write and its dry run: the same selection, read without
// locking and without changing anything.
type write struct{ run, dry string }

// recordColumns are a Record's columns, in the order Record.targets scans
// them.
const recordColumns = `id, seq, event_type, coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
	coalesce(partition_key, ''), coalesce(idempotency_key, ''), coalesce(content_type, ''),
	coalesce(octet_length(payload), 0), status, attempts, recoveries, snoozes, next_attempt_at,
	coalesce(lock_owner, ''), locked_at, lease_until, heartbeat_at,
	coalesce(last_error_code, ''), coalesce(last_error, ''), created_at, sent_at, failed_at`

// replaySet is what a replay writes: due now by the database clock, with a
// fresh retry, recovery and snooze budget. last_error_code, last_error and
// attempt_log stay as history; the lease columns are already NULL on a
// FAILED row. A skip (skipped_at) goes too: the replayed row is an
// unsent event again, and should it fail again it blocks its key like
// any FAILED head until it is skipped again. The token of the claim that wrote the FAILED outcome goes,
// so that a dispatcher retrying that write after its reply was lost does
// not take the replayed row for its own retry.
const replaySet = `status = 'PENDING', next_attempt_at = now(), attempts = 0, recoveries = 0, snoozes = 0, failed_at = NULL,
	lock_token = NULL, started_at = NULL, skipped_at = NULL`

// bounded is the shape of every bulk write: lock at most n matching rows
// in a sub-select (SKIP LOCKED) and reach them through the primary key
// with "id = ANY(ARRAY(...))". "id IN (SELECT … LIMIT n)" may be planned
// as a join that re-runs the sub-select and touches more than n rows.
const bounded = `o.id = ANY (ARRAY(SELECT id FROM %[1]s WHERE %[2]s LIMIT %[3]s FOR UPDATE SKIP LOCKED)) AND o.status = '%[4]s'`

// boundedWhere fills in bounded.
func boundedWhere(table, cond, limitParam, status string) string {
	return fmt.Sprintf(bounded, table, cond, limitParam, status)
}

// replayWrite is a replay of the FAILED rows that match cond (a WHERE
// clause on the outbox), at most limitParam of them, taken in the order
// given.
func replayWrite(t, cond, order, limitParam string) write {
	cond = `status = 'FAILED' AND ` + cond + ` ORDER BY ` + order
	return write{
		run: fmt.Sprintf(`UPDATE %[1]s AS o SET %[2]s WHERE %[3]s RETURNING o.id`,
			t, replaySet, boundedWhere(t, cond, limitParam, "FAILED")),
		dry: fmt.Sprintf(`SELECT id FROM %s WHERE %s LIMIT %s`, t, cond, limitParam),
	}
}

// Replay orders. A filter replay takes rows in the failed index's order
// (last_error_code, then seq), so that a batch reads the head of that
// index, which holds FAILED rows only, and stops at its limit: sorted by
// seq alone, every batch read and sorted all the matching FAILED rows
// (1.5 s per batch at a million of them). A replay by id reaches its rows
// through the primary key; "seq + 0" keeps the planner off the seq index
// (walking it in order reads past every SENT row) and sorts the named
// rows only.
const (
	replayFilterOrder = "last_error_code, seq"
	replayIDsOrder    = "seq + 0"
)

// SentCountLimit is the most SENT rows [Admin.Counts] and [Admin.Summary]
// count one by one. Past it they report SENT as an estimate (see
// Counts.SentEstimated): an exact count of a table's SENT rows reads all of
// them, seconds at ten million.
const SentCountLimit = 10_000

// BlockedCountLimit is the most FAILED, unskipped events with an order
// key that [Admin.Counts] and [Admin.Summary] read to count the due rows
// behind them (Counts.DueBlocked): each costs a heap read and a probe of
// the order index. Past it, or past [SentCountLimit] rows behind them,
// DueBlocked is a lower bound (Counts.DueBlockedLimited).
const BlockedCountLimit = 1_000

// blockedRowsLimit is the most due rows behind FAILED events that
// Counts.DueBlocked counts one by one (each a heap read).
const blockedRowsLimit = SentCountLimit

// sentEstimate is the planner's estimate of the rows in the table (%s, a
// string literal of its quoted name) now
// (its statistics scaled to its current size, as the planner scales them),
// from pg_class: it reads no row. -1 when the table was never analyzed
// or vacuumed (relpages 0; reltuples is then -1, or 0 before PostgreSQL
// 14): see Admin.plannerRows.
const sentEstimate = `(SELECT (CASE WHEN c.relpages > 0
		THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
		ELSE -1 END)::bigint
	FROM pg_class c WHERE c.oid = %s::regclass)`

func buildStatements(t string) statements {
	// Each count reads the partial index of its status (due, lease,
	// failed); SENT rows are counted up to SentCountLimit+1 through the
	// finished index (migration 004), whose entries start with the status,
	// so the count reads SENT entries only, whatever else the table holds;
	// the order is the index's, which only makes the planner walk it. The
	// total is estimated from pg_class.
	estimate := fmt.Sprintf(sentEstimate, quoteLiteral(t))
	dueBlocked := fmt.Sprintf(dueBlockedSQL, t, orderKey, orderIndexed, BlockedCountLimit, blockedRowsLimit)
	sentRows := fmt.Sprintf(`SELECT event_type, status, '' AS code, next_attempt_at, created_at FROM %s
		WHERE status = 'SENT' ORDER BY status, coalesce(sent_at, failed_at) LIMIT %d`, t, SentCountLimit+1)
	return statements{
		dueBlocked: "SELECT blk.n, blk.limited FROM " + dueBlocked + " AS blk",
		counts: fmt.Sprintf(`SELECT
	(SELECT count(*) FROM %[1]s WHERE status = 'PENDING'),
	(SELECT count(*) FROM %[1]s WHERE status = 'PROCESSING'),
	(SELECT count(*) FROM (%[2]s) AS s),
	(SELECT count(*) FROM %[1]s WHERE status = 'FAILED'),
	(SELECT count(*) FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()),
	coalesce((extract(epoch FROM now() - (
		SELECT next_attempt_at FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, seq LIMIT 1)) * 1000000)::bigint, 0),
	now(), %[3]s, blk.n, blk.limited FROM %[4]s AS blk`, t, sentRows, estimate, dueBlocked),

		// One row per (type, status, code): code only for FAILED rows,
		// each status read through its own index, SENT rows up to the
		// limit. The outer join gives the empty table one row, for now().
		summary: fmt.Sprintf(`SELECT now(), %[3]s, blk.n, blk.limited, g.* FROM %[4]s AS blk LEFT JOIN (
	SELECT event_type, status, code, count(*), count(*) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now()),
		min(created_at) FILTER (WHERE status = 'PENDING'),
		min(next_attempt_at) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now())
	FROM (
		SELECT event_type, status, '' AS code, next_attempt_at, created_at FROM %[1]s WHERE status = 'PENDING'
		UNION ALL SELECT event_type, status, '', next_attempt_at, created_at FROM %[1]s WHERE status = 'PROCESSING'
		UNION ALL SELECT event_type, status, coalesce(last_error_code, ''), next_attempt_at, created_at
			FROM %[1]s WHERE status = 'FAILED'
		UNION ALL (%[2]s)
	) AS r GROUP BY 1, 2, 3) AS g ON true
ORDER BY g.event_type, g.status, g.code`, t, sentRows, estimate, dueBlocked),

		// pendingByType reads the type due index only (its predicate,
		// written as the index has it: see migrations/006), in type
		// order, so its cost follows the PENDING rows, not the SENT ones.
		// pendingByType reads the type due index for the counts, and one
		// row per type (its lowest seq, through the seq list index, whose
		// predicate the status test repeats) for the
		// age of the type's oldest PENDING event.
		pendingByType: fmt.Sprintf(`SELECT p.event_type, p.n, p.due, p.due_age,
	coalesce((extract(epoch FROM now() - (SELECT o.created_at FROM %[1]s AS o WHERE o.seq = p.first AND o.status <> 'PROCESSING')) * 1000000)::bigint, 0)
FROM (
	SELECT event_type, count(*) AS n, count(*) FILTER (WHERE next_attempt_at <= now()) AS due,
		coalesce((extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now())) * 1000000)::bigint, 0) AS due_age,
		min(seq) AS first
	FROM %[1]s WHERE (status || '') = 'PENDING' GROUP BY event_type
) AS p
ORDER BY p.event_type`, t),

		inspect: fmt.Sprintf(`SELECT %[2]s, payload, headers, attempt_log FROM %[1]s WHERE id = $1`, t, recordColumns),

		replayIDs:     replayWrite(t, `id = ANY($1::uuid[])`, replayIDsOrder, "$2"),
		blocked:       blockedSQL(t),
		blockedByType: blockedByTypeSQL(t),
		skip:          skipWrite(t),
		notify:        `SELECT pg_notify($1, '')`,
	}
}

// quoteLiteral returns s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// where is a WHERE clause built from the filters an operator gave, with
// its arguments: only the filters given become conditions, so that the
// planner (in custom and generic plans alike) sees which index fits.
type where struct {
	conds []string
	args  []any
}

// arg adds v to the arguments and returns its placeholder.
func (w *where) arg(v any) string {
	w.args = append(w.args, v)
	return fmt.Sprintf("$%d", len(w.args))
}

// eq adds "column = value" unless value is empty.
func (w *where) eq(column, value string) {
	if value != "" {
		w.conds = append(w.conds, column+" = "+w.arg(value))
	}
}

// String joins the conditions with AND ("true" when there are none).
func (w *where) String() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

// orderKey is the order key of a row, written as the order index
// (migration 007) has it.
const orderKey = "coalesce(partition_key, aggregate_id)"

// dueBlockedSQL is a subquery (for a FROM list) of one row, (n,
// limited): n counts the due PENDING rows of table %[1]s behind a FAILED,
// unskipped row of their order key (%[2]s) with a lower seq
// (Counts.DueBlocked). It reads at most %[4]d+1 such FAILED rows (f,
// in the failed index's order, which makes the planner walk that index
// rather than scan the table until it finds them), takes each key's lowest seq
// among those it read, and probes the order index (%[3]s is its
// predicate) once per key for the due rows after it, counting at most
// %[5]d+1 of them (OFFSET 0 keeps the probe a subquery run per key:
// flattened, the planner may hash the keys and read the whole due
// backlog instead). limited says that either limit was passed: n is then
// a lower bound. Its cost is bounded by the limits, whatever the FAILED
// rows and the unsent rows of their keys.
const dueBlockedSQL = `(WITH f AS MATERIALIZED (
		SELECT %[2]s AS k, seq AS s FROM %[1]s
		WHERE status = 'FAILED' AND skipped_at IS NULL AND %[2]s IS NOT NULL
		ORDER BY last_error_code, seq LIMIT %[4]d + 1),
	h AS (SELECT k, min(s) AS s FROM (SELECT k, s FROM f LIMIT %[4]d) AS l GROUP BY k),
	r AS MATERIALIZED (SELECT 1 FROM h CROSS JOIN LATERAL (SELECT 1 FROM %[1]s
		WHERE %[2]s = h.k AND seq > h.s AND %[3]s AND status = 'PENDING' AND next_attempt_at <= now()
		OFFSET 0) AS b
		LIMIT %[5]d + 1)
	SELECT least((SELECT count(*) FROM r), %[5]d)::bigint AS n,
		(SELECT count(*) FROM f) > %[4]d OR (SELECT count(*) FROM r) > %[5]d AS limited)`

// orderIndexed is the order index's predicate (migration 007).
const orderIndexed = `status <> 'SENT' AND ` + orderKey + ` IS NOT NULL`

// blocker is the condition of a row that holds its key under head policy
// BlockKey (PENDING, PROCESSING, FAILED and not skipped), starting with
// the order index's predicate so that the planner may use that index.
const blocker = `status <> 'SENT' AND ` + orderKey + ` IS NOT NULL AND (status <> 'FAILED' OR skipped_at IS NULL)`

// blockedSQL walks the order index one key at a time, from the key after
// $1: each step reads the head of the next key (its lowest-seq blocker) in
// one probe of the index, and the walk stops after $2 keys or at the
// $3-th FAILED head. It returns each FAILED head with the blockers behind
// it counted up to $4+1, and the last key examined (so that the caller
// knows where the walk stopped), with the count of keys examined and of
// FAILED heads found.
func blockedSQL(t string) string {
	return fmt.Sprintf(`WITH RECURSIVE walk (n, found, k, id, seq, status, event_type, code, failed_at) AS (
	(SELECT 1, (status = 'FAILED')::int, %[2]s, id, seq, status, event_type, last_error_code, failed_at
		FROM %[1]s WHERE %[2]s > $1::text AND %[3]s ORDER BY %[2]s, seq LIMIT 1)
	UNION ALL
	SELECT w.n + 1, w.found + (h.status = 'FAILED')::int, h.k, h.id, h.seq, h.status, h.event_type, h.last_error_code, h.failed_at
	FROM walk AS w CROSS JOIN LATERAL (
		SELECT %[2]s AS k, id, seq, status, event_type, last_error_code, failed_at
		FROM %[1]s WHERE %[2]s > w.k AND %[3]s ORDER BY %[2]s, seq LIMIT 1) AS h
	WHERE w.n < $2::int AND w.found < $3::int
)
SELECT w.n, w.found, w.status = 'FAILED', w.k, w.id, w.seq, w.event_type, coalesce(w.code, ''), w.failed_at,
	CASE WHEN w.status = 'FAILED' THEN (SELECT count(*) FROM (SELECT 1 FROM %[1]s
		WHERE %[2]s = w.k AND seq > w.seq AND %[3]s ORDER BY %[2]s, seq LIMIT $4::int + 1) AS c) ELSE 0 END
FROM walk AS w WHERE w.status = 'FAILED' OR w.n = (SELECT max(n) FROM walk)
ORDER BY w.n`, t, orderKey, blocker)
}

// blockedByTypeSQL is blockedSQL for order scope key and type: it walks
// the order index one key at a time from the key after $1, and for each
// key reads its first $4+1 blockers in seq order (one probe of the
// index), takes the first of each type among them (the head of the
// pair), and counts as blocked the pairs whose head is FAILED. The walk
// stops after $2 keys or once $3 blocked pairs were found. It returns
// one row per blocked pair, with the pair's blockers behind its head
// among those read and whether the key had more blockers than were read,
// and the last key examined (blocked false), each with the count of keys
// examined and of blocked pairs found.
func blockedByTypeSQL(t string) string {
	window := func(k string) string {
		return fmt.Sprintf(`SELECT id, seq, status, event_type, last_error_code, failed_at FROM %[1]s
			WHERE %[2]s = %[4]s AND %[3]s ORDER BY %[2]s, seq LIMIT $4::int + 1`, t, orderKey, blocker, k)
	}
	pairs := func(k string) string {
		return fmt.Sprintf(`SELECT DISTINCT ON (b.event_type) b.* FROM (%s) AS b ORDER BY b.event_type, b.seq`, window(k))
	}
	blockedIn := func(k string) string {
		return fmt.Sprintf(`(SELECT count(*) FROM (%s) AS p WHERE p.status = 'FAILED')::int`, pairs(k))
	}
	return fmt.Sprintf(`WITH RECURSIVE walk (n, found, k) AS (
	(SELECT 1, %[4]s, f.k FROM (SELECT %[2]s AS k FROM %[1]s WHERE %[2]s > $1::text AND %[3]s ORDER BY %[2]s, seq LIMIT 1) AS f)
	UNION ALL
	SELECT w.n + 1, w.found + %[5]s, h.k
	FROM walk AS w CROSS JOIN LATERAL (
		SELECT %[2]s AS k FROM %[1]s WHERE %[2]s > w.k AND %[3]s ORDER BY %[2]s, seq LIMIT 1) AS h
	WHERE w.n < $2::int AND w.found < $3::int
)
SELECT w.n, w.found, p.id IS NOT NULL, w.k, coalesce(p.id, '00000000-0000-0000-0000-000000000000'::uuid), coalesce(p.seq, 0),
	coalesce(p.event_type, ''), coalesce(p.last_error_code, ''), p.failed_at, coalesce(p.waiting, 0), coalesce(p.more, false)
FROM walk AS w LEFT JOIN LATERAL (
	SELECT p.*, (SELECT count(*) FROM (%[6]s) AS b WHERE b.event_type = p.event_type AND b.seq > p.seq)::int AS waiting,
		(SELECT count(*) FROM (%[6]s) AS b) > $4::int AS more
	FROM (%[7]s) AS p WHERE p.status = 'FAILED'
) AS p ON true
WHERE p.id IS NOT NULL OR w.n = (SELECT max(n) FROM walk)
ORDER BY w.n, p.event_type`, t, orderKey, blocker, blockedIn("f.k"), blockedIn("h.k"), window("w.k"), pairs("w.k"))
}

// skipWrite sets skipped_at on the rows named by $1 (distinct ids, $2 of
// them) if every one of them is FAILED, and on none otherwise, in one
// statement. The rows are locked with SKIP LOCKED (the lock returns each
// row's newest version): a row that another transaction holds counts as
// not skippable, so the write never waits and is never part of a
// deadlock. It returns one line per named row it found: id, status,
// whether this statement locked it, skipped_at. A row skipped before
// keeps its first skipped_at. The UPDATE takes the rows "locked" found
// FAILED rather than testing status itself: it tests the version of the
// statement's snapshot, and a row that became FAILED after the snapshot
// (locked in its newest version) was reported skipped and left as it was
// (TestSkipHeadsRowFailedMidStatement). The dry run reads the same rows without
// locks.
func skipWrite(t string) write {
	return write{
		run: fmt.Sprintf(`WITH seen AS (SELECT id, status FROM %[1]s WHERE id = ANY($1::uuid[])),
locked AS MATERIALIZED (SELECT id, status FROM %[1]s WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE SKIP LOCKED),
skipped AS (
	UPDATE %[1]s AS o SET skipped_at = coalesce(o.skipped_at, now())
	WHERE o.id = ANY($1::uuid[]) AND o.id = ANY (ARRAY(SELECT id FROM locked WHERE status = 'FAILED'))
		AND (SELECT count(*) FROM locked WHERE status = 'FAILED') = $2::int
	RETURNING o.id, o.skipped_at)
SELECT s.id, coalesce(l.status, s.status), l.id IS NOT NULL, k.skipped_at
FROM seen AS s LEFT JOIN locked AS l USING (id) LEFT JOIN skipped AS k USING (id)`, t),
		dry: fmt.Sprintf(`SELECT id, status, true, skipped_at FROM %s WHERE id = ANY($1::uuid[])`, t),
	}
}
