package main

import (
	"context"
	"slices"
	"strings"
	"sync"
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
	// stmts, when set (-sqltime), times every query by its statement.
	stmts *stmtTimes
}

// stmtTimes is the count and the total time, start to the end of its
// rows, of each statement a pool ran, by the statement's first words.
type stmtTimes struct {
	mu sync.Mutex
	by map[string]*stmtTime
}

type stmtTime struct {
	N  int64   `json:"n"`
	MS float64 `json:"ms"`
}

// stmtStart is the context key of a timed query's start and statement.
type stmtStart struct{}

type stmtStamp struct {
	at  time.Time
	sql string
}

// stmtName is a statement's first 60 characters, spaces folded.
func stmtName(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	return s[:min(len(s), 60)]
}

func (st *stmtTimes) add(sql string, d time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	name := stmtName(sql)
	t := st.by[name]
	if t == nil {
		t = &stmtTime{}
		st.by[name] = t
	}
	t.N++
	t.MS += float64(d.Microseconds()) / 1000
}

// snapshot is the times so far, in milliseconds rounded to 0.1.
func (st *stmtTimes) snapshot() map[string]stmtTime {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]stmtTime, len(st.by))
	for k, v := range st.by {
		out[k] = stmtTime{N: v.N, MS: round(v.MS, 1)}
	}
	return out
}

// reset forgets the times so far.
func (st *stmtTimes) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.by = map[string]*stmtTime{}
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
	if t.stmts != nil {
		ctx = context.WithValue(ctx, stmtStart{}, stmtStamp{at: time.Now(), sql: data.SQL})
	}
	if isClaim(data.SQL) {
		return context.WithValue(ctx, claimStart{}, time.Now())
	}
	return ctx
}

// TraceQueryEnd keeps the longest claim.
func (t *roundTrips) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(stmtStart{}).(stmtStamp); ok {
		t.stmts.add(s.sql, time.Since(s.at))
	}
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
