package main

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// roundTrips counts what a pool sends: each query or exec, each batch
// (pipelined, so one round trip however many statements) and each COPY;
// and it keeps the longest claim (see isClaim), start to end of its rows
// (or of its batch).
type roundTrips struct {
	queries, batches, copies atomic.Int64
	slowestClaim             atomic.Int64 // nanoseconds
}

// claimStart is the context key of a claim's start time.
type claimStart struct{}

// isClaim reports whether a statement is a claim: it leases rows by
// setting them PROCESSING (pgoutbox's claims, and the raw and minimal
// loops').
func isClaim(sql string) bool { return strings.Contains(sql, "SET status = 'PROCESSING'") }

// TraceQueryStart counts a query and stamps a claim's start.
func (t *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.queries.Add(1)
	if isClaim(data.SQL) {
		return context.WithValue(ctx, claimStart{}, time.Now())
	}
	return ctx
}

// TraceQueryEnd keeps the longest claim.
func (t *roundTrips) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if start, ok := ctx.Value(claimStart{}).(time.Time); ok {
		t.keepSlowest(time.Since(start))
	}
}

// keepSlowest keeps d if it is the longest claim so far.
func (t *roundTrips) keepSlowest(took time.Duration) {
	d := int64(took)
	for {
		cur := t.slowestClaim.Load()
		if d <= cur || t.slowestClaim.CompareAndSwap(cur, d) {
			return
		}
	}
}

// resetSlowest forgets the claims timed so far (the preload's).
func (t *roundTrips) resetSlowest() { t.slowestClaim.Store(0) }

// slowestMS is the longest claim timed since resetSlowest, in
// milliseconds.
func (t *roundTrips) slowestMS() float64 { return round(float64(t.slowestClaim.Load())/1e6, 1) }

// TraceBatchStart counts a batch and stamps the start of one that holds
// a claim (a claim of some types runs in a batch, after its SET LOCAL).
func (t *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	t.batches.Add(1)
	if data.Batch != nil && slices.ContainsFunc(data.Batch.QueuedQueries, func(q *pgx.QueuedQuery) bool { return isClaim(q.SQL) }) {
		return context.WithValue(ctx, claimStart{}, time.Now())
	}
	return ctx
}

// TraceBatchQuery does nothing.
func (t *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd keeps the longest batch that held a claim, however it
// ended (a claim that ran out of time too).
func (t *roundTrips) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if start, ok := ctx.Value(claimStart{}).(time.Time); ok {
		t.keepSlowest(time.Since(start))
	}
}

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
