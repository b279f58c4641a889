package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The slowest claim is timed whether the claim is a query or a statement
// of a batch (a claim of some types), and however the batch ended; other
// statements are not timed.
func TestSlowestClaim(t *testing.T) {
	t.Parallel()
	const claim = `UPDATE outbox_events AS o SET status = 'PROCESSING', lock_token = $2 WHERE o.id = ANY ($1)`
	var rt roundTrips
	other := &pgx.Batch{}
	other.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
	other.Queue(`UPDATE outbox_events SET lease_until = now() WHERE id = ANY ($1)`)
	ctx := rt.TraceBatchStart(context.Background(), nil, pgx.TraceBatchStartData{Batch: other})
	rt.TraceBatchEnd(ctx, nil, pgx.TraceBatchEndData{})
	ctx = rt.TraceQueryStart(context.Background(), nil, pgx.TraceQueryStartData{SQL: `SELECT 1`})
	rt.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{})
	require.Zero(t, rt.slowestClaim.Load(), "no claim yet")

	typed := &pgx.Batch{}
	typed.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
	typed.Queue(claim)
	ctx = rt.TraceBatchStart(context.Background(), nil, pgx.TraceBatchStartData{Batch: typed})
	rt.TraceBatchEnd(ctx, nil, pgx.TraceBatchEndData{Err: context.DeadlineExceeded})
	require.Positive(t, rt.slowestClaim.Load(), "a batch holding a claim that ran out of time")

	rt.resetSlowest()
	ctx = rt.TraceQueryStart(context.Background(), nil, pgx.TraceQueryStartData{SQL: claim})
	rt.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{})
	require.Positive(t, rt.slowestClaim.Load(), "a claim query")
	require.Equal(t, int64(4), rt.total(), "every query and batch is counted")
}
