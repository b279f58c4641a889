package main

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// roundTrips counts what a pool sends: each query or exec, each batch
// (pipelined, so one round trip however many statements) and each COPY.
type roundTrips struct {
	queries, batches, copies atomic.Int64
}

// TraceQueryStart counts a query.
func (t *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.queries.Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (t *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch.
func (t *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.batches.Add(1)
	return ctx
}

// TraceBatchQuery does nothing.
func (t *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (t *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart counts a COPY.
func (t *roundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	t.copies.Add(1)
	return ctx
}

// TraceCopyFromEnd does nothing.
func (t *roundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// total is the round trips counted so far (statement preparation by pgx's
// cache is not counted).
func (t *roundTrips) total() int64 { return t.queries.Load() + t.batches.Load() + t.copies.Load() }
