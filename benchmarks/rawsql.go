package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// rawClaimSQL is the minimal correct claim: lock B due PENDING rows in a CTE
// on the outbox table alone, in the partial index's order, and lease them
// under one fresh token.
const rawClaimSQL = `WITH due AS MATERIALIZED (
	SELECT id FROM outbox_events
	WHERE status = 'PENDING' AND next_attempt_at <= now()
	ORDER BY next_attempt_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE outbox_events AS o
SET status = 'PROCESSING', lock_token = $2, locked_at = now(), lease_until = now() + interval '30 seconds'
WHERE o.id = ANY (ARRAY(SELECT id FROM due))
RETURNING o.id, o.event_type, o.payload`

// rawCompleteSQL is the minimal fenced batch completion: id, token and an
// unexpired lease.
const rawCompleteSQL = `UPDATE outbox_events AS o
SET status = 'SENT', sent_at = now(), attempts = o.attempts + 1, lock_token = NULL, lease_until = NULL
WHERE o.id = ANY ($1::uuid[]) AND o.lock_token = $2 AND o.status = 'PROCESSING' AND o.lease_until > now()`

// runRawSQL runs the raw-SQL limit: insert (one event and one business row
// per transaction with plain INSERTs), copy (Batch events per transaction
// by COPY) and dispatch (W workers of claim, no-op, fenced completion).
func runRawSQL(ctx context.Context, o Options) (Result, error) {
	return pick(ctx, o, []mode{{"insert", rawInsert}, {"copy", rawCopy}, {"dispatch", rawDispatch}})
}

func rawInsert(ctx context.Context, o Options) (Result, error) {
	body := payload(o.Payload)
	o.Notify = false
	return emitRun(ctx, o, "insert", func(ctx context.Context, tx pgx.Tx, _ int) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (amount, note) VALUES ($1, $2)`, 42, "bench"); err != nil {
			return err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_type, payload) VALUES ($1, $2, $3, $4)`,
			id, eventType, "order", body)
		return err
	}, 1)
}

func rawCopy(ctx context.Context, o Options) (Result, error) {
	body := payload(o.Payload)
	o.Notify = false
	return emitRun(ctx, o, "copy", func(ctx context.Context, tx pgx.Tx, n int) error {
		rows := make([][]any, n)
		for i := range rows {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			rows[i] = []any{id, eventType, body}
		}
		got, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox_events"}, []string{"id", "event_type", "payload"}, pgx.CopyFromRows(rows))
		if err == nil && got != int64(n) {
			err = fmt.Errorf("copied %d rows, want %d", got, n)
		}
		return err
	}, o.Batch)
}

func rawDispatch(ctx context.Context, o Options) (Result, error) {
	db, err := backlogDB(ctx, o, o.Writers+1)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	return loopDispatch[uuid.UUID](ctx, o, db, "outbox_events", rawClaimSQL, rawCompleteSQL)
}

// loopDispatch drains db's backlog in table with W workers of claimLoop
// (claimSQL, completeSQL; ID is the table's id type) and verifies that N
// rows ended SENT.
func loopDispatch[ID any](ctx context.Context, o Options, db *benchDB, table, claimSQL, completeSQL string) (Result, error) {
	res, err := loopDrain[ID](ctx, o, db, claimSQL, completeSQL)
	if err != nil {
		return Result{}, err
	}
	return res.verify(ctx, db, o.N, `SELECT count(*) FROM `+table+` WHERE status = 'SENT'`)
}

// loopDrain drains db's backlog with W workers of claimLoop and returns
// the unverified result.
func loopDrain[ID any](ctx context.Context, o Options, db *benchDB, claimSQL, completeSQL string) (Result, error) {
	var sent atomic.Int64
	trips0 := db.trips.total()
	db.trips.resetSlowest()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range o.Writers {
		g.Go(func() error { return claimLoop[ID](gctx, db, o.Batch, claimSQL, completeSQL, &sent) })
	}
	if err := g.Wait(); err != nil {
		return Result{}, err
	}
	res := throughput("dispatch", int(sent.Load()), time.Since(start))
	res.Params = map[string]any{"batch": o.Batch, "workers": o.Writers, "round_trips": db.trips.total() - trips0,
		"slowest_claim_ms": db.trips.slowestMS()}
	return res, nil
}

// claimLoop claims (claimSQL: batch size, token; returns id, type,
// payload), "publishes" (no-op) and completes (completeSQL: ids, token)
// batches until a claim comes back empty.
func claimLoop[ID any](ctx context.Context, db *benchDB, batch int, claimSQL, completeSQL string, sent *atomic.Int64) error {
	ids := make([]ID, 0, batch)
	for {
		token := uuid.New()
		rows, err := db.pool.Query(ctx, claimSQL, batch, token)
		if err != nil {
			return err
		}
		ids = ids[:0]
		var id ID
		var typ string
		var body []byte
		_, err = pgx.ForEachRow(rows, []any{&id, &typ, &body}, func() error {
			ids = append(ids, id)
			return nil
		})
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		tag, err := db.pool.Exec(ctx, completeSQL, ids, token)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(ids)) {
			return fmt.Errorf("completed %d of %d rows", tag.RowsAffected(), len(ids))
		}
		sent.Add(int64(len(ids)))
	}
}
