package admin

import (
	"fmt"
	"strings"
)

// statements is the SQL text for one outbox table, built once by New.
type statements struct {
	counts, summary, inspect, notify string
	pendingByType                    string
	replayIDs                        write
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
// FAILED row. The token of the claim that wrote the FAILED outcome goes,
// so that a dispatcher retrying that write after its reply was lost does
// not take the replayed row for its own retry.
const replaySet = `status = 'PENDING', next_attempt_at = now(), attempts = 0, recoveries = 0, snoozes = 0, failed_at = NULL,
	lock_token = NULL, started_at = NULL`

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
// clause on the outbox), at most limitParam of them, oldest seq first.
// "seq + 0" keeps the planner off the seq index: walking it in order and
// filtering for FAILED reads past every SENT row, while the failed index
// holds FAILED rows only (the sort is of those).
func replayWrite(t, cond, limitParam string) write {
	cond = `status = 'FAILED' AND ` + cond + ` ORDER BY seq + 0`
	return write{
		run: fmt.Sprintf(`UPDATE %[1]s AS o SET %[2]s WHERE %[3]s RETURNING o.id`,
			t, replaySet, boundedWhere(t, cond, limitParam, "FAILED")),
		dry: fmt.Sprintf(`SELECT id FROM %s WHERE %s LIMIT %s`, t, cond, limitParam),
	}
}

// SentCountLimit is the most SENT rows [Admin.Counts] and [Admin.Summary]
// count one by one. Past it they report SENT as an estimate (see
// Counts.SentEstimated): an exact count of a table's SENT rows reads all of
// them, seconds at ten million.
const SentCountLimit = 10_000

// sentEstimate is the planner's estimate of the rows in the table (%s, a
// string literal of its quoted name) now
// (its statistics scaled to its current size, as the planner scales them),
// from pg_class: it reads no row. -1 when the table was never analyzed
// or vacuumed.
const sentEstimate = `(SELECT (CASE WHEN c.relpages > 0
		THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
		ELSE c.reltuples END)::bigint
	FROM pg_class c WHERE c.oid = %s::regclass)`

func buildStatements(t string) statements {
	// Each count reads the partial index of its status (due, lease,
	// failed); SENT rows are counted up to SentCountLimit+1 through the
	// seq index, and the total estimated from pg_class.
	estimate := fmt.Sprintf(sentEstimate, quoteLiteral(t))
	sentRows := fmt.Sprintf(`SELECT event_type, status, '' AS code, next_attempt_at, created_at FROM %s
		WHERE status = 'SENT' ORDER BY seq LIMIT %d`, t, SentCountLimit+1)
	return statements{
		counts: fmt.Sprintf(`SELECT
	(SELECT count(*) FROM %[1]s WHERE status = 'PENDING'),
	(SELECT count(*) FROM %[1]s WHERE status = 'PROCESSING'),
	(SELECT count(*) FROM (%[2]s) AS s),
	(SELECT count(*) FROM %[1]s WHERE status = 'FAILED'),
	(SELECT count(*) FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()),
	coalesce((extract(epoch FROM now() - (
		SELECT next_attempt_at FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, seq LIMIT 1)) * 1000000)::bigint, 0),
	now(), %[3]s`, t, sentRows, estimate),

		// One row per (type, status, code): code only for FAILED rows,
		// each status read through its own index, SENT rows up to the
		// limit. The outer join gives the empty table one row, for now().
		summary: fmt.Sprintf(`SELECT now(), %[3]s, g.* FROM (SELECT 1) AS one LEFT JOIN (
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
ORDER BY g.event_type, g.status, g.code`, t, sentRows, estimate),

		// pendingByType reads the type due index only (its predicate,
		// written as the index has it: see migrations/006), in type
		// order, so its cost follows the PENDING rows, not the SENT ones.
		pendingByType: fmt.Sprintf(`SELECT event_type, count(*), count(*) FILTER (WHERE next_attempt_at <= now()),
	coalesce((extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now())) * 1000000)::bigint, 0)
FROM %s WHERE (status || '') = 'PENDING' GROUP BY event_type ORDER BY event_type`, t),

		inspect: fmt.Sprintf(`SELECT %[2]s, payload, headers, attempt_log FROM %[1]s WHERE id = $1`, t, recordColumns),

		replayIDs: replayWrite(t, `id = ANY($1::uuid[])`, "$2"),
		notify:    `SELECT pg_notify($1, '')`,
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
