package admin

import (
	"fmt"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// statements is the SQL text for one outbox, built once by New. T is the
// outbox table (PENDING and PROCESSING rows, and strays), D its dead
// letters (FAILED rows) and H its SENT history (partitioned by sent_at):
// see docs/schema.md, schema version 10.
type statements struct {
	counts, summary, inspect, notify string
	// countsOff and summaryOff are counts and summary for a table
	// without the order index: nothing is blocked (noneBlocked).
	countsOff, summaryOff  string
	pendingByType, blocked string
	blockedByType          string
	// dueBlocked is Counts.DueBlocked's part of counts and summary on its
	// own (for the plan tests).
	dueBlocked string
	replayIDs  write
	skip       write
	// auditLock waits for a request id ($1) other transactions hold
	// and auditDone says whether an audit row records it; auditInsert
	// writes one audit row; auditPage reads a page of them,
	// newest first, after the id $1 (0: from the newest), $2 rows.
	auditLock, auditDone, auditInsert, auditPage string
	// t, dead and sent are T, D and H, quoted and qualified, for
	// replayArgs, listSQL and historyRows.
	t, dead, sent string
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

// replaySet is what a replay writes in the row it moves back: due now by
// the database clock, with a fresh retry, recovery and snooze budget.
// last_error_code, last_error, attempt_log and outcome_token stay as
// history; the lease columns are already NULL on a dead letter. A skip
// (skipped_at) goes too: the replayed row is an unsent event again, and
// should it fail again it blocks its key like any FAILED head until it is
// skipped again. The token of the claim that wrote the FAILED outcome
// goes, so that a dispatcher retrying that write after its reply was lost
// does not take the replayed row for its own retry.
var replaySet = map[string]string{
	"status": "'PENDING'", "next_attempt_at": "now()", "attempts": "0", "recoveries": "0", "snoozes": "0",
	"failed_at": "NULL", "lock_token": "NULL", "started_at": "NULL", "skipped_at": "NULL",
}

// replayWrite moves back into the outbox table t the dead letters of d
// that match cond (a WHERE clause), at most limitParam of them, taken in
// the order given and locked with SKIP LOCKED, in one statement: each
// goes back with its id and seq (OVERRIDING SYSTEM VALUE: seq is an
// identity column of t) and replaySet, and leaves d only when its insert
// succeeded. A dead letter whose id t already holds (a stray, or an event
// emitted again with that id) is not inserted (ON CONFLICT DO NOTHING)
// and stays in d. It returns one line per dead letter taken: its id and
// whether it was moved. The dry run reads the same rows without locks and
// tells the conflicts from t as it is now.
func replayWrite(t, d, cond, order, limitParam string) write {
	sel := make([]string, len(sqlname.Columns))
	for i, c := range sqlname.Columns {
		sel[i] = c
		if v, ok := replaySet[c]; ok {
			sel[i] = v
		}
	}
	cols := strings.Join(sqlname.Columns, ", ")
	return write{
		run: fmt.Sprintf(`WITH picked AS MATERIALIZED (
	SELECT %[3]s FROM %[2]s WHERE %[5]s ORDER BY %[6]s LIMIT %[7]s FOR UPDATE SKIP LOCKED),
moved AS (
	INSERT INTO %[1]s AS o (%[3]s) OVERRIDING SYSTEM VALUE SELECT %[4]s FROM picked
	ON CONFLICT (id) DO NOTHING RETURNING o.id),
gone AS (DELETE FROM %[2]s AS d WHERE d.id = ANY (ARRAY(SELECT id FROM moved)) RETURNING d.id)
SELECT p.id, g.id IS NOT NULL FROM picked AS p LEFT JOIN gone AS g USING (id)`,
			t, d, cols, strings.Join(sel, ", "), cond, order, limitParam),
		// The probe of t is a LATERAL subquery with a LIMIT, run once per
		// dead letter through t's primary key: as NOT EXISTS the planner
		// may hash all of t instead.
		dry: fmt.Sprintf(`SELECT d.id, c.id IS NULL FROM (SELECT id, seq, last_error_code FROM %[2]s WHERE %[3]s ORDER BY %[4]s LIMIT %[5]s) AS d
	LEFT JOIN LATERAL (SELECT o.id FROM %[1]s AS o WHERE o.id = d.id LIMIT 1) AS c ON true
ORDER BY %[4]s`, t, d, cond, order, limitParam),
	}
}

// Replay orders. A filter replay takes dead letters in the code index's
// order (last_error_code, then seq), so that a batch reads the head of
// that index and stops at its limit. A replay by id reaches its rows
// through the primary key; "seq + 0" keeps the planner off the seq index
// (walking it in order reads past every other dead letter) and sorts the
// named rows only.
const (
	replayFilterOrder = "last_error_code, seq"
	replayIDsOrder    = "seq + 0"
)

// SentCountLimit is the most SENT rows [Admin.Counts] and [Admin.Summary]
// count one by one in the history. Past it they report SENT as an
// estimate (see Counts.SentEstimated): an exact count of the history
// reads all of it, seconds at ten million. It also bounds the count of
// rows still in the outbox table with status SENT or FAILED
// (Counts.Unmoved).
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

// historyEstimate is the planner's estimate of the rows in the SENT
// history (%s, a string literal of its quoted name) now: the sum over its
// partitions of their statistics scaled to their current size, as the
// planner scales them, from pg_class; it reads no row. An empty partition
// never analyzed counts 0; -1 when a partition with pages was never
// analyzed nor vacuumed (relpages 0; reltuples is then -1, or 0 before
// PostgreSQL 14): see Admin.historyRows.
const historyEstimate = `(SELECT coalesce(CASE WHEN bool_or(c.relpages = 0 AND pg_relation_size(c.oid) > 0) THEN -1
		ELSE sum(CASE WHEN c.relpages > 0
			THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
			ELSE 0 END) END, 0)::bigint
	FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass)`

// countedRows counts the rows of a select, at most limit: "(SELECT
// count(*) FROM (sel LIMIT limit) AS c)".
func countedRows(sel string, limit int) string {
	return fmt.Sprintf(`(SELECT count(*) FROM (%s LIMIT %d) AS c)`, sel, limit)
}

func buildStatements(n sqlname.Names) statements {
	t, d, h := n.Qualified, n.Dead, n.Sent
	dueBlocked := fmt.Sprintf(dueBlockedSQL, t, d, orderKey, orderIndexed, BlockedCountLimit, blockedRowsLimit)
	return statements{
		t: t, dead: d, sent: h,
		dueBlocked:    "SELECT blk.n, blk.limited FROM " + dueBlocked + " AS blk",
		counts:        countsSQL(n, dueBlocked),
		summary:       summarySQL(n, dueBlocked),
		countsOff:     countsSQL(n, noneBlocked),
		summaryOff:    summarySQL(n, noneBlocked),
		pendingByType: pendingByTypeSQL(t),

		// The outbox table by its primary key, else the dead letters by
		// theirs, else the history by its id index (one probe per
		// partition); LIMIT 1 stops at the first table that has the row.
		// One snapshot: a row moved meanwhile is seen in one place.
		inspect: fmt.Sprintf(`SELECT * FROM (
	(SELECT %[4]s, payload, headers, attempt_log FROM %[1]s WHERE id = $1)
	UNION ALL (SELECT %[4]s, payload, headers, attempt_log FROM %[2]s WHERE id = $1)
	UNION ALL (SELECT %[4]s, payload, headers, attempt_log FROM %[3]s WHERE id = $1 LIMIT 1)) AS r LIMIT 1`,
			t, d, h, recordColumns),

		replayIDs:     replayWrite(t, d, `id = ANY($1::uuid[])`, replayIDsOrder, "$2"),
		blocked:       blockedSQL(t, d),
		blockedByType: blockedByTypeSQL(t, d),
		skip:          skipWrite(t, d, h),
		notify:        `SELECT pg_notify($1, '')`,
		auditLock:     `SELECT pg_advisory_xact_lock(hashtextextended(` + quoteLiteral(n.Audit) + ` || $1::uuid::text, 0))`,
		auditDone:     `SELECT EXISTS (SELECT FROM ` + n.Audit + ` WHERE request_id = $1::uuid)`,
		auditInsert: `INSERT INTO ` + n.Audit + ` (actor, source, action, filter, rows, request_id)
	VALUES ($1, $2, $3, $4::jsonb, $5, $6)`,
		auditPage: `SELECT id, at, actor, source, action, filter, rows, request_id FROM ` + n.Audit + `
	WHERE id < CASE WHEN $1::bigint = 0 THEN 9223372036854775807 ELSE $1::bigint END ORDER BY id DESC LIMIT $2`,
	}
}

// noneBlocked is dueBlockedSQL's row for a table without the order
// index (schema version 12 without migrations.Config.KeyOrder): no
// dispatcher orders per key, so no due row is blocked.
const noneBlocked = `(SELECT 0::bigint AS n, false AS limited)`

// sentRowsSQL selects the history's rows in seq order (its seq index,
// one scan per partition merged), and strayRowsSQL the strays of the
// outbox table through the stray index, which holds them only: Counts
// and Summary count each up to SentCountLimit+1.
const (
	sentRowsSQL  = `SELECT event_type, status, '' AS code, next_attempt_at, created_at FROM %s ORDER BY seq`
	strayRowsSQL = `SELECT 1 FROM %s WHERE status IN ('SENT', 'FAILED') ORDER BY seq`
)

// countsSQL is Counts' statement, with dueBlocked (dueBlockedSQL, or
// noneBlocked) for Counts.DueBlocked. PENDING through the due index,
// PROCESSING through the held index (both partial: the backlog only),
// FAILED in the dead letters, SENT in the history up to the limit, the
// strays up to the limit.
func countsSQL(n sqlname.Names, dueBlocked string) string {
	t, d, h := n.Qualified, n.Dead, n.Sent
	return fmt.Sprintf(`SELECT
	(SELECT count(*) FROM %[1]s WHERE status = 'PENDING'),
	(SELECT count(*) FROM %[1]s WHERE status = 'PROCESSING'),
	%[2]s,
	(SELECT count(*) FROM %[6]s),
	(SELECT count(*) FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()),
	coalesce((extract(epoch FROM now() - (
		SELECT next_attempt_at FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, seq LIMIT 1)) * 1000000)::bigint, 0),
	now(), %[3]s, blk.n, blk.limited, %[5]s FROM %[4]s AS blk`,
		t, countedRows(fmt.Sprintf(sentRowsSQL, h), SentCountLimit+1), fmt.Sprintf(historyEstimate, quoteLiteral(h)),
		dueBlocked, countedRows(fmt.Sprintf(strayRowsSQL, t), SentCountLimit+1), d)
}

// summarySQL is Summary's statement, with dueBlocked as in countsSQL:
// one row per (type, status, code): code only for FAILED rows, each
// status read in its table (and index), SENT rows up to the limit. The
// outer join gives the empty outbox one row, for now(). The strays are
// counted apart (Counts.Unmoved).
func summarySQL(n sqlname.Names, dueBlocked string) string {
	t, d, h := n.Qualified, n.Dead, n.Sent
	return fmt.Sprintf(`SELECT now(), %[3]s, blk.n, blk.limited, %[5]s, g.* FROM %[4]s AS blk LEFT JOIN (
	SELECT event_type, status, code, count(*), count(*) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now()),
		min(created_at) FILTER (WHERE status = 'PENDING'),
		min(next_attempt_at) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now())
	FROM (
		SELECT event_type, status, '' AS code, next_attempt_at, created_at FROM %[1]s WHERE status = 'PENDING'
		UNION ALL SELECT event_type, status, '', next_attempt_at, created_at FROM %[1]s WHERE status = 'PROCESSING'
		UNION ALL SELECT event_type, 'FAILED', coalesce(last_error_code, ''), next_attempt_at, created_at FROM %[6]s
		UNION ALL (%[2]s LIMIT %[7]d)
	) AS r GROUP BY 1, 2, 3) AS g ON true
ORDER BY g.event_type, g.status, g.code`,
		t, fmt.Sprintf(sentRowsSQL, h), fmt.Sprintf(historyEstimate, quoteLiteral(h)), dueBlocked,
		countedRows(fmt.Sprintf(strayRowsSQL, t), SentCountLimit+1), d, SentCountLimit+1)
}

// pendingByTypeSQL reads every PENDING row of t once, in the due index's
// order (t has no type index since schema version 11; the subquery's
// ORDER BY makes the planner walk that index, or scan t when most of it
// is PENDING, which costs the same backlog), and groups them by type: the
// counts, the age of the oldest due row, and the created_at of the row
// with the lowest seq, taken in the same pass as the least (seq,
// created_at) pair. It never reads the dead letters or the history.
func pendingByTypeSQL(t string) string {
	return fmt.Sprintf(`SELECT event_type, count(*), count(*) FILTER (WHERE next_attempt_at <= now()),
	coalesce((extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now())) * 1000000)::bigint, 0),
	coalesce(((extract(epoch FROM now()) - (min(ARRAY[seq::numeric, extract(epoch FROM created_at)]))[2]) * 1000000)::bigint, 0)
FROM (SELECT event_type, next_attempt_at, seq, created_at FROM %s WHERE status = 'PENDING'
	ORDER BY next_attempt_at, seq) AS p
GROUP BY event_type ORDER BY event_type`, t)
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

// orderKey is the order key of a row, written as the order indexes of
// the outbox table (migration 007) and of the dead letters have it.
const orderKey = "coalesce(partition_key, aggregate_id)"

// dueBlockedSQL is a subquery (for a FROM list) of one row, (n,
// limited): n counts the due PENDING rows of the outbox table %[1]s
// behind an unskipped dead letter of %[2]s of their order key (%[3]s)
// with a lower seq (Counts.DueBlocked). It reads at most %[5]d+1 such
// dead letters (f, in the dead order index's order, so each key's first
// is its lowest seq), and probes the outbox's order index (%[4]s is its
// predicate) once per key for the due rows after it, counting at most
// %[6]d+1 of them (OFFSET 0 keeps the probe a subquery run per key:
// flattened, the planner may hash the keys and read the whole due
// backlog instead). limited says that either limit was passed: n is then
// a lower bound. Its cost is bounded by the limits, whatever the dead
// letters and the backlog of their keys.
const dueBlockedSQL = `(WITH f AS MATERIALIZED (
		SELECT %[3]s AS k, seq AS s FROM %[2]s
		WHERE skipped_at IS NULL AND %[3]s IS NOT NULL
		ORDER BY %[3]s, seq LIMIT %[5]d + 1),
	h AS (SELECT k, min(s) AS s FROM (SELECT k, s FROM f LIMIT %[5]d) AS l GROUP BY k),
	r AS MATERIALIZED (SELECT 1 FROM h CROSS JOIN LATERAL (SELECT 1 FROM %[1]s
		WHERE %[3]s = h.k AND seq > h.s AND %[4]s AND status = 'PENDING' AND next_attempt_at <= now()
		OFFSET 0) AS b
		LIMIT %[6]d + 1)
	SELECT least((SELECT count(*) FROM r), %[6]d)::bigint AS n,
		(SELECT count(*) FROM f) > %[5]d OR (SELECT count(*) FROM r) > %[6]d AS limited)`

// orderIndexed is the outbox order index's predicate (migration 007).
const orderIndexed = `status <> 'SENT' AND ` + orderKey + ` IS NOT NULL`

// blocker is the condition of an outbox row that holds its key under head
// policy BlockKey (PENDING, PROCESSING, and a stray FAILED not skipped),
// starting with the order index's predicate so that the planner may use
// that index. Every unskipped dead letter with a key is a blocker too.
const blocker = orderIndexed + ` AND (status <> 'FAILED' OR skipped_at IS NULL)`

// deadBlocker is the condition of a dead letter that holds its key,
// starting with the dead order index's predicate.
const deadBlocker = orderKey + ` IS NOT NULL AND skipped_at IS NULL`

// deadHead is the head of the first key after %[3]s among the dead
// letters of %[2]s that hold it: one probe of the dead order index (the
// skipped dead letters of the key are read and passed over), with
// whether it heads its key, that is no blocker of the outbox %[1]s with a
// lower seq holds the key (one probe of the outbox's order index).
func deadHead(t, d, after string) string {
	return fmt.Sprintf(`SELECT f.*, NOT EXISTS (SELECT 1 FROM %[1]s AS o
		WHERE %[4]s = f.k AND o.seq < f.seq AND %[5]s) AS b
	FROM (SELECT %[4]s AS k, id, seq, event_type, last_error_code AS code, failed_at FROM %[2]s
		WHERE %[4]s > %[3]s AND %[6]s ORDER BY %[4]s, seq LIMIT 1) AS f`, t, d, after, orderKey, blocker, deadBlocker)
}

// blockedSQL walks the dead order index one key at a time, from the key
// after $1: each step reads the next key's first unskipped dead letter
// and probes the outbox's order index for a blocker of the key with a
// lower seq (the key's head is then in the outbox, not FAILED). The walk
// stops after $2 keys or at the $3-th FAILED head. It returns each FAILED
// head with the blockers behind it (in the outbox and the dead letters)
// counted up to $4+1, and the last key examined (so that the caller
// knows where the walk stopped), with the count of keys examined and of
// FAILED heads found.
func blockedSQL(t, d string) string {
	return fmt.Sprintf(`WITH RECURSIVE walk (n, found, k, id, seq, event_type, code, failed_at, b) AS (
	SELECT 1, h.b::int, h.* FROM (%[5]s) AS h
	UNION ALL
	SELECT w.n + 1, w.found + h.b::int, h.*
	FROM walk AS w CROSS JOIN LATERAL (%[6]s) AS h
	WHERE w.n < $2::int AND w.found < $3::int
)
SELECT w.n, w.found, w.b, w.k, w.id, w.seq, w.event_type, coalesce(w.code, ''), w.failed_at,
	CASE WHEN w.b THEN (SELECT count(*) FROM (
		(SELECT 1 FROM %[1]s WHERE %[3]s = w.k AND seq > w.seq AND %[4]s ORDER BY %[3]s, seq LIMIT $4::int + 1)
		UNION ALL
		(SELECT 1 FROM %[2]s WHERE %[3]s = w.k AND seq > w.seq AND %[7]s ORDER BY %[3]s, seq LIMIT $4::int + 1)
		LIMIT $4::int + 1) AS c) ELSE 0 END
FROM walk AS w WHERE w.b OR w.n = (SELECT max(n) FROM walk)
ORDER BY w.n`, t, d, orderKey, blocker, deadHead(t, d, "$1::text"), deadHead(t, d, "w.k"), deadBlocker)
}

// blockedByTypeSQL is blockedSQL for order scope key and type: it walks
// the dead order index one key at a time from the key after $1, and for
// each key reads its first $4+1 blockers in seq order (the first $4+1 of
// the outbox's and of the dead letters', merged), takes the first of
// each type among them (the head of the pair), and counts as blocked the
// pairs whose head is FAILED. The walk stops after $2 keys or once $3
// blocked pairs were found. It returns one row per blocked pair, with the
// pair's blockers behind its head among those read and whether the key
// had more blockers than were read, and the last key examined (blocked
// false), each with the count of keys examined and of blocked pairs
// found.
func blockedByTypeSQL(t, d string) string {
	window := func(k string) string {
		return fmt.Sprintf(`SELECT * FROM (
			(SELECT id, seq, status, event_type, last_error_code, failed_at FROM %[1]s
				WHERE %[3]s = %[5]s AND %[4]s ORDER BY %[3]s, seq LIMIT $4::int + 1)
			UNION ALL
			(SELECT id, seq, status, event_type, last_error_code, failed_at FROM %[2]s
				WHERE %[3]s = %[5]s AND %[6]s ORDER BY %[3]s, seq LIMIT $4::int + 1)) AS u
			ORDER BY seq LIMIT $4::int + 1`, t, d, orderKey, blocker, k, deadBlocker)
	}
	pairs := func(k string) string {
		return fmt.Sprintf(`SELECT DISTINCT ON (b.event_type) b.* FROM (%s) AS b ORDER BY b.event_type, b.seq`, window(k))
	}
	blockedIn := func(k string) string {
		return fmt.Sprintf(`(SELECT count(*) FROM (%s) AS p WHERE p.status = 'FAILED')::int`, pairs(k))
	}
	next := func(after string) string {
		return fmt.Sprintf(`SELECT %[2]s AS k FROM %[1]s WHERE %[2]s > %[3]s AND %[4]s ORDER BY %[2]s, seq LIMIT 1`,
			d, orderKey, after, deadBlocker)
	}
	return fmt.Sprintf(`WITH RECURSIVE walk (n, found, k) AS (
	SELECT 1, %[1]s, f.k FROM (%[4]s) AS f
	UNION ALL
	SELECT w.n + 1, w.found + %[2]s, h.k
	FROM walk AS w CROSS JOIN LATERAL (%[5]s) AS h
	WHERE w.n < $2::int AND w.found < $3::int
)
SELECT w.n, w.found, p.id IS NOT NULL, w.k, coalesce(p.id, '00000000-0000-0000-0000-000000000000'::uuid), coalesce(p.seq, 0),
	coalesce(p.event_type, ''), coalesce(p.last_error_code, ''), p.failed_at, coalesce(p.waiting, 0), coalesce(p.more, false)
FROM walk AS w LEFT JOIN LATERAL (
	SELECT p.*, (SELECT count(*) FROM (%[3]s) AS b WHERE b.event_type = p.event_type AND b.seq > p.seq)::int AS waiting,
		(SELECT count(*) FROM (%[3]s) AS b) > $4::int AS more
	FROM (%[6]s) AS p WHERE p.status = 'FAILED'
) AS p ON true
WHERE p.id IS NOT NULL OR w.n = (SELECT max(n) FROM walk)
ORDER BY w.n, p.event_type`, blockedIn("f.k"), blockedIn("h.k"), window("w.k"), next("$1::text"), next("w.k"), pairs("w.k"))
}

// skipWrite sets skipped_at on the dead letters of d named by $1
// (distinct ids, $2 of them) if every one of them is a dead letter, and
// on none otherwise, in one statement. The dead letters are locked with
// SKIP LOCKED (the lock returns each row's newest version): one that
// another transaction holds (a replay, a purge) counts as not skippable,
// so the write never waits and is never part of a deadlock. It returns
// one line per named row it found, in the dead letters, else the outbox
// t, else the history h (for the status a rejection names): id, status,
// whether this statement locked it, skipped_at. A row skipped before
// keeps its first skipped_at. The UPDATE takes the rows "locked" found
// rather than those of the statement's snapshot: a row that became a
// dead letter after the snapshot (locked in its newest version) was
// reported skipped and left as it was (TestSkipHeadsRowFailedMidStatement).
// The dry run reads the same rows without locks.
func skipWrite(t, d, h string) write {
	seen := fmt.Sprintf(`SELECT DISTINCT ON (id) id, status FROM (
	SELECT id, status, 0 AS w FROM %[2]s WHERE id = ANY($1::uuid[])
	UNION ALL SELECT id, status, 1 FROM %[1]s WHERE id = ANY($1::uuid[])
	UNION ALL SELECT id, status, 2 FROM %[3]s WHERE id = ANY($1::uuid[])) AS s ORDER BY id, w`, t, d, h)
	return write{
		run: fmt.Sprintf(`WITH seen AS (%[2]s),
locked AS MATERIALIZED (SELECT id, status FROM %[1]s WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE SKIP LOCKED),
skipped AS (
	UPDATE %[1]s AS o SET skipped_at = coalesce(o.skipped_at, now())
	WHERE o.id = ANY($1::uuid[]) AND o.id = ANY (ARRAY(SELECT id FROM locked))
		AND (SELECT count(*) FROM locked) = $2::int
	RETURNING o.id, o.skipped_at)
SELECT s.id, coalesce(l.status, s.status), l.id IS NOT NULL, k.skipped_at
FROM seen AS s LEFT JOIN locked AS l USING (id) LEFT JOIN skipped AS k USING (id)`, d, seen),
		dry: fmt.Sprintf(`SELECT s.id, s.status, true, (SELECT d.skipped_at FROM %[1]s AS d WHERE d.id = s.id) FROM (%[2]s) AS s`, d, seen),
	}
}
