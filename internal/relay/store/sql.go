package store

import (
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// statements is the SQL of one log table, built once by New.
type statements struct {
	takeTicker, releaseTicker, tick, addParts, parts, xmax, clusterXmax string

	createGroup, dropGroup, dropParked, takeGroup, groupState, renewGroup, releaseGroup, stopGroup string
	ticks, openBatch, stream, move, park, parkKeys, parkedKeys, groups                             string

	requests, parkedEvents, fence, unpark string
}

// lease is lease_until for a lease of $n microseconds from now, on the
// database clock.
func leaseUntil(n string) string {
	return `clock_timestamp() + $` + n + `::bigint * interval '1 microsecond'`
}

// tickColumns reads a tick in the order scanTick scans it.
const tickColumns = `k.tick_id, k.snapshot::text, k.tick_time, k.last_seq, k.sysid`

func newStatements(n sqlname.Names) statements {
	ticker := n.Log(sqlname.SuffixTicker)
	ticks := n.Log(sqlname.SuffixTicks)
	cursors := n.Log(sqlname.SuffixCursors)
	parked := n.Log(sqlname.SuffixParked)
	parkedKeys := n.Log(sqlname.SuffixParkedKeys)
	// events reads the events of a batch c → t in seq order: $1 xmax_c,
	// $2 xmax_t, $3 the xids done between them (snap.go), $4 and $5 the
	// snapshots of t and c, $6 the seq to start after.
	events := `SELECT e.seq, e.xid::text, e.id::text, e.event_type, coalesce(e.aggregate_type, ''), coalesce(e.aggregate_id, ''),
				coalesce(e.partition_key, ''), coalesce(e.idempotency_key, ''), coalesce(e.content_type, ''),
				e.headers::text, e.payload, e.created_at
			FROM ` + n.Qualified + ` AS e
			WHERE ((e.xid >= $1::text::xid8 AND e.xid < $2::text::xid8) OR e.xid = ANY ($3::text[]::xid8[]))
				AND pg_visible_in_snapshot(e.xid, $4::text::pg_snapshot)
				AND NOT pg_visible_in_snapshot(e.xid, $5::text::pg_snapshot)
				AND e.seq > $6
			ORDER BY e.seq`
	return statements{
		takeTicker: `UPDATE ` + ticker + ` SET owner = $1, token = $2::uuid, lease_until = ` + leaseUntil("3") + `,
			heartbeat_at = clock_timestamp()
			WHERE token IS NULL OR token = $2::uuid OR lease_until <= clock_timestamp()`,
		releaseTicker: `UPDATE ` + ticker + ` SET owner = NULL, token = NULL, lease_until = NULL WHERE token = $1::uuid`,
		tick:          `SELECT tick_id, made FROM ` + n.Function(sqlname.SuffixTick) + `($1::uuid, $2::bigint * interval '1 microsecond')`,
		// The parts from the current xid's on: part_add creates the
		// missing ones (a catalog probe for those that exist).
		addParts: `SELECT count(*) FILTER (WHERE a), max(pg_snapshot_xmax(s)::text::numeric)::text
			FROM (SELECT pg_current_snapshot()) AS x(s),
			LATERAL (SELECT ` + n.Function(sqlname.SuffixPartAdd) + `(((div(pg_snapshot_xmax(s)::text::numeric, $2::bigint) + g) * $2::bigint)::text::xid8)
				FROM generate_series(0, $1::int - 1) AS g) AS p(a)`,
		xmax: `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`,
		clusterXmax: `SELECT pg_snapshot_xmax(pg_current_snapshot())::text,
			(SELECT pg_snapshot_xmax(k.snapshot)::text FROM ` + n.Log(sqlname.SuffixTicks) + ` AS k ORDER BY k.tick_id DESC LIMIT 1)`,
		parts: `SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass`,

		// createGroup: the newest tick ($2) or the oldest kept. No FOR
		// KEY SHARE on the tick: it needs UPDATE on the ticks, which
		// neither the relay's nor the operator's role has.
		createGroup: `INSERT INTO ` + cursors + ` (grp, last_tick)
			SELECT $1, CASE WHEN $2::boolean THEN max(tick_id) ELSE min(tick_id) END FROM ` + ticks + `
			ON CONFLICT (grp) DO NOTHING`,
		// dropGroup deletes the cursor row first (waiting for a move or
		// settle that holds it), then, in a later statement of the same
		// transaction (a newer snapshot), the parked rows: those that
		// move committed are deleted too, and no later move can write
		// any (it finds no cursor row).
		dropGroup: `DELETE FROM ` + cursors + ` WHERE grp = $1`,
		dropParked: `WITH p AS (DELETE FROM ` + parked + ` WHERE grp = $1)
			DELETE FROM ` + parkedKeys + ` WHERE grp = $1`,
		takeGroup: `UPDATE ` + cursors + ` SET owner = $2, token = $3::uuid, lease_until = ` + leaseUntil("4") + `,
			heartbeat_at = clock_timestamp()
			WHERE grp = $1 AND stopped_reason IS NULL
				AND (token IS NULL OR token = $3::uuid OR lease_until <= clock_timestamp())
			RETURNING last_tick, coalesce(batch_tick, 0), coalesce(batch_seq, 0)`,
		groupState: `SELECT stopped_reason FROM ` + cursors + ` WHERE grp = $1`,
		renewGroup: `UPDATE ` + cursors + ` SET lease_until = ` + leaseUntil("3") + `, heartbeat_at = clock_timestamp()
			WHERE grp = $1 AND token = $2::uuid AND lease_until > clock_timestamp() AND stopped_reason IS NULL`,
		releaseGroup: `UPDATE ` + cursors + ` SET owner = NULL, token = NULL, lease_until = NULL, heartbeat_at = NULL
			WHERE grp = $1 AND token = $2::uuid`,
		stopGroup: `UPDATE ` + cursors + ` SET stopped_reason = $3, owner = NULL, token = NULL, lease_until = NULL
			WHERE grp = $1 AND token = $2::uuid`,

		// ticks reads the cursor tick $1, the target tick and the newest
		// tick. The target is $2 when not 0 (an open batch), else the
		// newest tick after $1 whose last_seq is at most $3 past $1's, or
		// the next tick after $1; none when there is no tick after $1.
		ticks: `WITH t AS (SELECT CASE WHEN $2::bigint <> 0 THEN $2::bigint ELSE (
				SELECT k.tick_id FROM ` + ticks + ` AS k WHERE k.tick_id > $1
					AND (k.last_seq <= (SELECT c.last_seq FROM ` + ticks + ` AS c WHERE c.tick_id = $1) + $3::bigint
						OR k.tick_id = (SELECT min(f.tick_id) FROM ` + ticks + ` AS f WHERE f.tick_id > $1))
				ORDER BY k.tick_id DESC LIMIT 1) END AS id)
			SELECT ` + tickColumns + `, k.tick_id = $1, coalesce(k.tick_id = (SELECT id FROM t), false), false
			FROM ` + ticks + ` AS k WHERE k.tick_id = $1 OR k.tick_id = (SELECT id FROM t)
			UNION ALL (SELECT ` + tickColumns + `, false, false, true FROM ` + ticks + ` AS k ORDER BY k.tick_id DESC LIMIT 1)`,
		// openBatch records the target $4 of the batch from $3; recording
		// the same target again changes nothing (a stream whose statement
		// failed after its target was recorded opens again).
		openBatch: `UPDATE ` + cursors + ` SET batch_tick = $4, batch_seq = NULL
			WHERE grp = $1 AND token = $2::uuid AND lease_until > clock_timestamp() AND stopped_reason IS NULL
				AND last_tick = $3 AND (batch_tick IS NULL OR (batch_tick = $4 AND batch_seq IS NULL))`,
		// stream: the events statement, without a limit; a stream reads
		// it once.
		stream: events,
		// move: $5 the new last_tick, $6 batch_tick and $7 batch_seq after
		// the move (NULL when the batch is whole).
		move: `UPDATE ` + cursors + ` SET last_tick = $5, batch_tick = $6, batch_seq = $7, moved_at = clock_timestamp()
			WHERE grp = $1 AND token = $2::uuid AND lease_until > clock_timestamp() AND stopped_reason IS NULL
				AND last_tick = $3 AND batch_tick = $4 AND coalesce(batch_seq, 0) = $8`,
		park: `INSERT INTO ` + parked + ` (grp, seq, xid, id, event_type, aggregate_type, aggregate_id, partition_key,
				idempotency_key, content_type, payload, headers, created_at, key, error_code, error)
			SELECT $1, p.seq, p.xid::xid8, p.id::uuid, p.event_type, nullif(p.aggregate_type, ''), nullif(p.aggregate_id, ''),
				nullif(p.partition_key, ''), nullif(p.idempotency_key, ''), nullif(p.content_type, ''), p.payload, p.headers::jsonb, p.created_at, p.key, nullif(p.code, ''), left(p.error, 2048)
			FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
				$10::text[], $11::bytea[], $12::text[], $13::timestamptz[], $14::text[], $15::text[], $16::text[])
				AS p(seq, xid, id, event_type, aggregate_type, aggregate_id, partition_key, idempotency_key,
				content_type, payload, headers, created_at, key, code, error)
			ON CONFLICT (grp, seq) DO NOTHING`,
		parkKeys: `INSERT INTO ` + parkedKeys + ` (grp, key, error_code, error)
			SELECT $1, k.key, nullif(k.code, ''), left(k.error, 2048) FROM unnest($2::text[], $3::text[], $4::text[]) AS k(key, code, error)
			ON CONFLICT (grp, key) DO NOTHING`,
		parkedKeys: `SELECT key FROM ` + parkedKeys + ` WHERE grp = $1`,
		// requests: a group's pending replay and skip requests, oldest
		// first (the primary key's (grp, key) prefix finds the group's
		// few rows).
		requests: `SELECT key, skip_requested_at IS NOT NULL FROM ` + parkedKeys + `
			WHERE grp = $1 AND (replay_requested_at IS NOT NULL OR skip_requested_at IS NOT NULL)
			ORDER BY coalesce(replay_requested_at, skip_requested_at), key LIMIT $2`,
		// parkedEvents: the parked events of keys $2, in seq order, with
		// the events statement's columns.
		parkedEvents: `SELECT e.seq, e.xid::text, e.id::text, e.event_type, coalesce(e.aggregate_type, ''), coalesce(e.aggregate_id, ''),
				coalesce(e.partition_key, ''), coalesce(e.idempotency_key, ''), coalesce(e.content_type, ''),
				e.headers::text, e.payload, e.created_at
			FROM ` + parked + ` AS e WHERE e.grp = $1 AND e.key = ANY ($2::text[]) ORDER BY e.seq`,
		// fence locks the cursor row where token holds an unexpired lease
		// and the cursor is where the caller saw it: a write without a
		// move (Settle) is fenced as a move is.
		fence: `SELECT 1 FROM ` + cursors + `
			WHERE grp = $1 AND token = $2::uuid AND lease_until > clock_timestamp() AND stopped_reason IS NULL
				AND last_tick = $3 AND coalesce(batch_tick, 0) = $4 AND coalesce(batch_seq, 0) = $5
			FOR NO KEY UPDATE`,
		// unpark deletes the parked events and key rows of keys $2 (a
		// replay or skip carried out) and clears the requests of keys $3
		// (keys the reader had not parked).
		unpark: `WITH p AS (DELETE FROM ` + parked + ` WHERE grp = $1 AND key = ANY ($2::text[])),
			c AS (UPDATE ` + parkedKeys + ` SET replay_requested_at = NULL, skip_requested_at = NULL
				WHERE grp = $1 AND key = ANY ($3::text[]))
			DELETE FROM ` + parkedKeys + ` WHERE grp = $1 AND key = ANY ($2::text[])`,
		// groups: every group ($1 '') or one, with its lag: events is
		// the newest tick's last_seq less the cursor tick's; seconds the
		// age of the first tick after the cursor that holds events (0
		// when caught up); then the newest tick's age.
		groups: `SELECT g.grp, g.last_tick, coalesce(g.batch_tick, 0), coalesce(g.batch_seq, 0), coalesce(g.owner, ''),
				coalesce(g.lease_until > clock_timestamp(), false), g.lease_until, coalesce(g.stopped_reason, ''),
				g.created_at, g.moved_at, c.tick_id IS NOT NULL,
				coalesce(n.last_seq - c.last_seq, 0),
				coalesce((SELECT extract(epoch FROM clock_timestamp() - f.tick_time)::float8 FROM ` + ticks + ` AS f
					WHERE f.tick_id > c.tick_id AND f.last_seq > c.last_seq ORDER BY f.tick_id LIMIT 1), 0),
				coalesce(extract(epoch FROM clock_timestamp() - n.tick_time)::float8, 0),
				(SELECT count(*) FROM ` + parkedKeys + ` AS k WHERE k.grp = g.grp)
			FROM ` + cursors + ` AS g
			LEFT JOIN ` + ticks + ` AS c ON c.tick_id = g.last_tick
			LEFT JOIN LATERAL (SELECT tick_time, last_seq FROM ` + ticks + ` ORDER BY tick_id DESC LIMIT 1) AS n ON true
			WHERE $1 = '' OR g.grp = $1 ORDER BY g.grp`,
	}
}
