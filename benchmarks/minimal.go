package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// minimalDDL is the outbox a user would write by hand: a bigserial id, the
// event's type and payload, a status, a due time, a lease (token and
// expiry), and one partial index on the due PENDING rows.
const minimalDDL = `CREATE TABLE minimal_outbox (
	id bigserial PRIMARY KEY,
	type text NOT NULL,
	payload bytea,
	status text NOT NULL DEFAULT 'PENDING',
	next_attempt_at timestamptz NOT NULL DEFAULT now(),
	lock_token uuid,
	lease_until timestamptz
);
CREATE INDEX minimal_outbox_due ON minimal_outbox (next_attempt_at, id) WHERE status = 'PENDING';`

// minimalClaimSQL is rawClaimSQL on the minimal outbox: lock B due PENDING
// rows in the partial index's order and lease them under one token.
const minimalClaimSQL = `WITH due AS MATERIALIZED (
	SELECT id FROM minimal_outbox
	WHERE status = 'PENDING' AND next_attempt_at <= now()
	ORDER BY next_attempt_at, id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE minimal_outbox AS o
SET status = 'PROCESSING', lock_token = $2, lease_until = now() + interval '30 seconds'
WHERE o.id = ANY (ARRAY(SELECT id FROM due))
RETURNING o.id, o.type, o.payload`

// minimalCompleteSQL is the fenced batch completion on the minimal outbox:
// id, token, PROCESSING and an unexpired lease.
const minimalCompleteSQL = `UPDATE minimal_outbox AS o
SET status = 'SENT', lock_token = NULL, lease_until = NULL
WHERE o.id = ANY ($1::bigint[]) AND o.lock_token = $2 AND o.status = 'PROCESSING' AND o.lease_until > now()`

// minimalDeleteSQL is minimal-delete's completion: the same fence as
// minimalCompleteSQL, and the row is deleted instead of kept as SENT.
const minimalDeleteSQL = `DELETE FROM minimal_outbox AS o
WHERE o.id = ANY ($1::bigint[]) AND o.lock_token = $2 AND o.status = 'PROCESSING' AND o.lease_until > now()`

// runMinimal runs the minimal hand-written outbox (minimalDDL), the second
// raw reference: insert (one event and one business row per transaction
// with plain INSERTs), insert-multi (Batch events per transaction in one
// multi-row INSERT … VALUES), copy (Batch events per transaction by COPY),
// dispatch (W workers of the same fenced claim/complete loop as raw-sql,
// completing to SENT) and dispatch-delete (minimal-delete: the same loop,
// completing by a fenced DELETE).
func runMinimal(ctx context.Context, o Options) (Result, error) {
	return pick(ctx, o, []mode{{"insert", minimalInsert}, {"insert-multi", minimalInsertMulti}, {"copy", minimalCopy},
		{"dispatch", minimalDispatch}, {"dispatch-delete", minimalDispatchDelete}})
}

// minimalInsertMulti writes Batch events per transaction in one multi-row
// INSERT … VALUES ($1, $2), ($3, $4), … (two parameters a row).
func minimalInsertMulti(ctx context.Context, o Options) (Result, error) {
	body := payload(o.Payload)
	o.Notify = false
	return emitRunIn(ctx, o, "minimal_outbox", "insert-multi", func(ctx context.Context, tx pgx.Tx, n int) error {
		var sql strings.Builder
		sql.WriteString(`INSERT INTO minimal_outbox (type, payload) VALUES `)
		args := make([]any, 0, 2*n)
		for i := range n {
			if i > 0 {
				sql.WriteString(", ")
			}
			fmt.Fprintf(&sql, "($%d, $%d)", 2*i+1, 2*i+2)
			args = append(args, eventType, body)
		}
		tag, err := tx.Exec(ctx, sql.String(), args...)
		if err == nil && tag.RowsAffected() != int64(n) {
			err = fmt.Errorf("inserted %d rows, want %d", tag.RowsAffected(), n)
		}
		return err
	}, o.Batch)
}

func minimalInsert(ctx context.Context, o Options) (Result, error) {
	body := payload(o.Payload)
	o.Notify = false
	return emitRunIn(ctx, o, "minimal_outbox", "insert", func(ctx context.Context, tx pgx.Tx, _ int) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (amount, note) VALUES ($1, $2)`, 42, "bench"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO minimal_outbox (type, payload) VALUES ($1, $2)`, eventType, body)
		return err
	}, 1)
}

func minimalCopy(ctx context.Context, o Options) (Result, error) {
	body := payload(o.Payload)
	o.Notify = false
	return emitRunIn(ctx, o, "minimal_outbox", "copy", func(ctx context.Context, tx pgx.Tx, n int) error {
		rows := make([][]any, n)
		for i := range rows {
			rows[i] = []any{eventType, body}
		}
		got, err := tx.CopyFrom(ctx, pgx.Identifier{"minimal_outbox"}, []string{"type", "payload"}, pgx.CopyFromRows(rows))
		if err == nil && got != int64(n) {
			err = fmt.Errorf("copied %d rows, want %d", got, n)
		}
		return err
	}, o.Batch)
}

func minimalDispatch(ctx context.Context, o Options) (Result, error) {
	db, err := backlogDBWith(ctx, o, o.Writers+1, func(ctx context.Context, db *benchDB) error {
		return preloadMinimal(ctx, db, o.N, o.Payload)
	})
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	return loopDispatch[int64](ctx, o, db, "minimal_outbox", minimalClaimSQL, minimalCompleteSQL)
}

// minimalDispatchDelete is minimal-delete: minimalDispatch with a
// completion that deletes the rows (minimalDeleteSQL); it verifies that
// the table is empty.
func minimalDispatchDelete(ctx context.Context, o Options) (Result, error) {
	db, err := backlogDBWith(ctx, o, o.Writers+1, func(ctx context.Context, db *benchDB) error {
		return preloadMinimal(ctx, db, o.N, o.Payload)
	})
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	res, err := loopDrain[int64](ctx, o, db, minimalClaimSQL, minimalDeleteSQL)
	if err != nil {
		return Result{}, err
	}
	return res.verifyGone(ctx, db, o.N, `SELECT count(*) FROM minimal_outbox`)
}

// preloadMinimal inserts n due PENDING events of size bytes into the
// minimal outbox in one statement, then vacuums and analyzes it as preload
// does outbox_events.
func preloadMinimal(ctx context.Context, db *benchDB, n, size int) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO minimal_outbox (type, payload) SELECT $1, $2::bytea FROM generate_series(1, $3)`,
		eventType, payload(size), n)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(ctx, `VACUUM ANALYZE minimal_outbox`)
	return err
}
