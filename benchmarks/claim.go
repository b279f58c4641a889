package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// claimRounds is how many claim+complete cycles the claim case times.
const claimRounds = 200

// runClaim loads Backlog due PENDING rows, then times claimRounds claims of
// Batch rows through lease.Store (each followed by its completion, so the
// backlog stays about the same) and reports the claim latency.
func runClaim(ctx context.Context, o Options) (Result, error) {
	db, err := openMigrated(ctx, o.URL, 2)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	if err := bulkLoad(ctx, db, o.Backlog, o.Payload); err != nil {
		return Result{}, err
	}
	store, err := lease.New(outbox.Table{})
	if err != nil {
		return Result{}, err
	}
	rounds := min(claimRounds, o.Backlog/o.Batch)
	samples, total, err := timeClaims(ctx, db, store, rounds, o.Batch)
	if err != nil {
		return Result{}, err
	}
	res := throughput("claim", rounds*o.Batch, total)
	res.setLatency(samples)
	res.Params = map[string]any{"backlog": o.Backlog, "batch": o.Batch, "claims": rounds}
	res.Note = "duration and events_per_s cover the claims only; completions are not timed"
	return res.verify(ctx, db, rounds*o.Batch, sentSQL)
}

// timeClaims claims and completes rounds batches and returns each claim's
// duration and their sum.
func timeClaims(ctx context.Context, db *benchDB, store *lease.Store, rounds, batch int) ([]int64, time.Duration, error) {
	samples := make([]int64, 0, rounds)
	var total time.Duration
	for range rounds {
		t0 := time.Now()
		b, err := store.Claim(ctx, db.pool, lease.ClaimParams{Owner: "bench", Limit: batch, Lease: time.Minute})
		d := time.Since(t0)
		if err != nil {
			return nil, 0, err
		}
		if len(b.Events) != batch {
			return nil, 0, fmt.Errorf("claimed %d rows, want %d", len(b.Events), batch)
		}
		samples, total = append(samples, d.Nanoseconds()), total+d
		if _, err := store.Complete(ctx, db.pool, lease.CompleteParams{Sent: b.Refs()}); err != nil {
			return nil, 0, err
		}
	}
	return samples, total, nil
}

// bulkLoad inserts n due PENDING rows with one INSERT … SELECT (random v4
// ids: PostgreSQL 15 has no uuidv7()), then VACUUM ANALYZE.
func bulkLoad(ctx context.Context, db *benchDB, n, size int) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
SELECT gen_random_uuid(), $2, $3::bytea FROM generate_series(1, $1)`, n, eventType, payload(size))
	if err == nil {
		_, err = db.pool.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	}
	return err
}
