package admin

import "fmt"

// statements is the SQL text for one outbox table, built once by New.
type statements struct {
	counts, list, inspect, notify string
	summary                       string
	replayIDs, replayFilter       write
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

func boundedWhere(table, cond, limitParam, status string) string {
	return fmt.Sprintf(bounded, table, cond, limitParam, status)
}

func buildStatements(t string) statements {
	replay := func(cond, limitParam string) write {
		cond = `status = 'FAILED' AND ` + cond + ` ORDER BY seq`
		return write{
			run: fmt.Sprintf(`UPDATE %[1]s AS o SET %[2]s WHERE %[3]s RETURNING o.id`,
				t, replaySet, boundedWhere(t, cond, limitParam, "FAILED")),
			dry: fmt.Sprintf(`SELECT id FROM %s WHERE %s LIMIT %s`, t, cond, limitParam),
		}
	}
	return statements{
		counts: fmt.Sprintf(`SELECT
	count(*) FILTER (WHERE status = 'PENDING'),
	count(*) FILTER (WHERE status = 'PROCESSING'),
	count(*) FILTER (WHERE status = 'SENT'),
	count(*) FILTER (WHERE status = 'FAILED'),
	count(*) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now()),
	coalesce((extract(epoch FROM now() - (
		SELECT next_attempt_at FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, seq LIMIT 1)) * 1000000)::bigint, 0),
	now()
FROM %[1]s`, t),

		// One row per (type, status, code): code only for FAILED rows. The
		// outer join gives the empty table one row, for now().
		summary: fmt.Sprintf(`SELECT now(), g.* FROM (SELECT 1) AS one LEFT JOIN (
	SELECT event_type, status, CASE WHEN status = 'FAILED' THEN coalesce(last_error_code, '') ELSE '' END AS code,
		count(*), count(*) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now()),
		min(created_at) FILTER (WHERE status = 'PENDING'),
		min(next_attempt_at) FILTER (WHERE status = 'PENDING' AND next_attempt_at <= now())
	FROM %s GROUP BY 1, 2, 3) AS g ON true
ORDER BY g.event_type, g.status, g.code`, t),

		list: fmt.Sprintf(`SELECT %[2]s FROM %[1]s
WHERE seq > $1 AND ($2::text = '' OR status = $2) AND ($3::text = '' OR event_type = $3)
	AND ($5::text = '' OR aggregate_id = $5) AND ($6::text = '' OR last_error_code = $6)
ORDER BY seq LIMIT $4`, t, recordColumns),

		inspect: fmt.Sprintf(`SELECT %[2]s, payload, headers, attempt_log FROM %[1]s WHERE id = $1`, t, recordColumns),

		replayIDs: replay(`id = ANY($1::uuid[])`, "$2"),
		replayFilter: replay(`($1::text = '' OR event_type = $1) AND ($2::text = '' OR last_error_code = $2)
	AND ($3::timestamptz IS NULL OR failed_at < $3)`, "$4"),
		notify: `SELECT pg_notify($1, '')`,
	}
}
