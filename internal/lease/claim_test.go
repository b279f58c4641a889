package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestClaim(t *testing.T) {
	t.Parallel()

	t.Run("attempt is ended attempts plus one", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := insertDue(t, e.db.Pool, 1)[0]
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET attempts = 4 WHERE id = $1`, id)
		require.NoError(t, err)

		b := claimOne(t, e, "w")
		require.Equal(t, 5, b.Events[0].Attempt)
		require.Equal(t, 4, get(t, e.db.Pool, id).Attempts, "a claim spends no attempt")
	})

	t.Run("waited is how long each event was due, on the database clock", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insert(t, e.db.Pool, spec{DueIn: -10 * time.Second}, spec{DueIn: -time.Second})

		b := claimN(t, e, 2)
		require.Len(t, b.Waited, 2)
		require.InDelta(t, 10, b.Waited[0].Seconds(), 1, "oldest due first")
		require.InDelta(t, 1, b.Waited[1].Seconds(), 1)
	})

	t.Run("empty table gives an empty batch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Empty(t, b.Events)
		require.Empty(t, b.Refs())
	})

	t.Run("fields round-trip", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		full := spec{
			Type:           "order.created",
			Payload:        []byte{0, 1, 2, 0xff, '{', '}'},
			Headers:        map[string]string{"traceparent": "00-abc-def-01", "x-tenant": "acme"},
			AggregateType:  "order",
			AggregateID:    "o-42",
			PartitionKey:   "p-7",
			IdempotencyKey: "idem-1",
			ContentType:    "application/x-protobuf",
		}
		minimal := spec{Type: "bare", DueIn: time.Microsecond}
		ids := insert(t, e.db.Pool, full, minimal)
		stored := get(t, e.db.Pool, ids[0])

		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, b.Events, 2)

		got := b.Events[0]
		require.Equal(t, outbox.Event{
			ID:             ids[0],
			Type:           full.Type,
			AggregateType:  full.AggregateType,
			AggregateID:    full.AggregateID,
			PartitionKey:   full.PartitionKey,
			IdempotencyKey: full.IdempotencyKey,
			Headers:        full.Headers,
			ContentType:    full.ContentType,
			Payload:        full.Payload,
			Attempt:        1,
			CreatedAt:      got.CreatedAt,
		}, got)
		require.True(t, got.CreatedAt.Equal(stored.CreatedAt), "CreatedAt %v, stored %v", got.CreatedAt, stored.CreatedAt)

		bare := b.Events[1]
		require.Equal(t, ids[1], bare.ID)
		require.Equal(t, "bare", bare.Type)
		require.Empty(t, bare.AggregateType)
		require.Empty(t, bare.AggregateID)
		require.Empty(t, bare.PartitionKey)
		require.Empty(t, bare.IdempotencyKey)
		require.Empty(t, bare.ContentType)
		require.Empty(t, bare.Payload)
		require.Empty(t, bare.Headers)
	})

	t.Run("invalid params are rejected", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 3)
		for name, p := range map[string]lease.ClaimParams{
			"no owner":       {Limit: 1, Lease: time.Minute},
			"zero limit":     {Owner: "w", Lease: time.Minute},
			"negative limit": {Owner: "w", Limit: -1, Lease: time.Minute},
			"zero lease":     {Owner: "w", Limit: 1},
			"sub-ms lease":   {Owner: "w", Limit: 1, Lease: time.Microsecond},
		} {
			b, err := e.store.Claim(t.Context(), e.db.Pool, p)
			require.ErrorIs(t, err, outbox.ErrInvalidConfig, name)
			require.Empty(t, b.Events, name)
		}
		require.Equal(t, 3, countStatus(t, e.db.Pool, "PENDING"), "a rejected claim changes nothing")
	})

	t.Run("lease comes from the database clock", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ids := insertDue(t, e.db.Pool, 3)
		const leaseFor = 90 * time.Second

		before := dbClock(t, e.db.Pool)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "worker-1", Limit: 10, Lease: leaseFor})
		require.NoError(t, err)
		after := dbClock(t, e.db.Pool)
		require.Len(t, b.Events, 3)
		require.NotEqual(t, uuid.Nil, b.Token)

		for _, id := range ids {
			r := get(t, e.db.Pool, id)
			require.Equal(t, "PROCESSING", r.Status)
			require.Equal(t, &b.Token, r.LockToken)
			require.Equal(t, "worker-1", *r.LockOwner)
			require.NotNil(t, r.LockedAt)
			between(t, *r.LockedAt, before, after, "locked_at")
			require.NotNil(t, r.HeartbeatAt)
			require.True(t, r.HeartbeatAt.Equal(*r.LockedAt))
			require.Equal(t, leaseFor, r.LeaseUntil.Sub(*r.LockedAt), "lease_until = now() + lease")
			require.True(t, b.LeaseUntil.Equal(*r.LeaseUntil), "batch LeaseUntil %v, row %v", b.LeaseUntil, *r.LeaseUntil)
			require.Zero(t, r.Attempts)
		}
		between(t, b.LeaseUntil, before.Add(leaseFor), after.Add(leaseFor), "LeaseUntil")
	})

	t.Run("skipped ids are left for other claimers", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ids := insertDue(t, e.db.Pool, 4)
		for name, p := range map[string]lease.ClaimParams{
			"every type, none started": {Start: 0},
			"every type, all started":  {Start: 2},
			"every type, some started": {Start: 1},
			"typed, none started":      {Start: 0, Types: []string{"test.event"}},
			"typed, all started":       {Start: 2, Types: []string{"test.event"}},
			"typed, some started":      {Start: 1, Types: []string{"test.event"}},
		} {
			p.Owner, p.Limit, p.Lease, p.Skip = "w", 2, time.Minute, []uuid.UUID{ids[0], ids[2]}
			b, err := e.store.Claim(t.Context(), e.db.Pool, p)
			require.NoError(t, err, name)
			require.Equal(t, []uuid.UUID{ids[1], ids[3]}, batchIDs(b), name)
			require.Equal(t, "PENDING", get(t, e.db.Pool, ids[0]).Status, name)
			_, err = e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET status = 'PENDING', lock_token = NULL, started_at = NULL`)
			require.NoError(t, err, name)
		}
	})

	t.Run("suspects are left for later claims", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ids := insertDue(t, e.db.Pool, 3)
		_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET recoveries = 1 WHERE id = $1`, ids[0])
		require.NoError(t, err)
		for _, types := range [][]string{nil, {"test.event"}} {
			b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 2, Lease: time.Minute, Types: types, SkipSuspects: true})
			require.NoError(t, err)
			require.Equal(t, []uuid.UUID{ids[1], ids[2]}, batchIDs(b))
			_, err = e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET status = 'PENDING', lock_token = NULL, started_at = NULL`)
			require.NoError(t, err)
		}
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 2, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ids[0], ids[1]}, batchIDs(b), "without SkipSuspects")
	})

	t.Run("limit bounds the batch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 7)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 5, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, b.Events, 5)
		require.Equal(t, 5, countStatus(t, e.db.Pool, "PROCESSING"))
		require.Equal(t, 2, countStatus(t, e.db.Pool, "PENDING"))

		b2, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 5, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, b2.Events, 2)
		require.NotEqual(t, b.Token, b2.Token, "each claim has a fresh token")
	})

	t.Run("one statement", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 20)
		pool, tr := tracedPool(t, e.db)
		b, err := e.store.Claim(t.Context(), pool, lease.ClaimParams{Owner: "w", Limit: 20, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, b.Events, 20)
		queries, batches, _ := tr.counts()
		require.Equal(t, 1, queries+batches, "round trips of a 20-row claim")
	})

	t.Run("only due pending rows", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ids := insert(t, e.db.Pool,
			spec{Type: "future", DueIn: time.Hour},
			spec{Type: "sent", Status: "SENT"},
			spec{Type: "failed", Status: "FAILED"},
			spec{Type: "processing (expired)", Status: "PROCESSING"},
			spec{Type: "due"},
			spec{Type: "overdue", DueIn: -time.Hour},
		)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 100, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ids[5], ids[4]}, batchIDs(b))
		for i, want := range []string{"PENDING", "SENT", "FAILED", "PROCESSING"} {
			r := get(t, e.db.Pool, ids[i])
			require.Equal(t, want, r.Status, "row %d", i)
			require.NotEqual(t, &b.Token, r.LockToken, "row %d", i)
		}
	})

	t.Run("ordered by next_attempt_at then seq", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Insertion (seq, and physical) order is the reverse of due order,
		// with ties on next_attempt_at broken by seq.
		const n = 60
		specs := make([]spec, n)
		for i := range specs {
			specs[i] = spec{DueIn: -time.Duration(i/2) * time.Second}
		}
		inserted := insert(t, e.db.Pool, specs...)
		// Rows i and i+1 (i even) share next_attempt_at; seq orders them.
		var want []uuid.UUID
		for i := n - 2; i >= 0; i -= 2 {
			want = append(want, inserted[i], inserted[i+1])
		}

		var got []uuid.UUID
		for {
			b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 25, Lease: time.Minute})
			require.NoError(t, err)
			if len(b.Events) == 0 {
				break
			}
			got = append(got, batchIDs(b)...)
		}
		require.Equal(t, want, got)
	})
}

func TestClaimBound(t *testing.T) {
	t.Parallel()
	const (
		claimers = 20
		limit    = 10
		rows     = 150
		rounds   = 5
	)
	e := newEnv(t)
	pool := e.db.NewPool(t, claimers)
	conns := make([]lease.DB, claimers)
	for i := range conns {
		c, err := pool.Acquire(t.Context())
		require.NoError(t, err)
		t.Cleanup(c.Release)
		conns[i] = c
	}

	for round := range rounds {
		_, err := e.db.Pool.Exec(t.Context(), `DELETE FROM outbox_events`)
		require.NoError(t, err)
		inserted := insertDue(t, e.db.Pool, rows)

		start := make(chan struct{})
		var wg sync.WaitGroup
		batches := make([][]lease.Batch, claimers)
		errs := make([]error, claimers)
		for i := range claimers {
			wg.Go(func() {
				<-start
				for {
					b, err := e.store.Claim(context.Background(), conns[i], lease.ClaimParams{
						Owner: fmt.Sprintf("claimer-%d", i), Limit: limit, Lease: time.Minute,
					})
					if err != nil {
						errs[i] = err
						return
					}
					if len(b.Events) == 0 {
						return
					}
					batches[i] = append(batches[i], b)
				}
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))

		owner := make(map[uuid.UUID]int)
		for i, bs := range batches {
			for _, b := range bs {
				require.LessOrEqual(t, len(b.Events), limit, "round %d claimer %d got a batch over the limit", round, i)
				for _, ev := range b.Events {
					prev, dup := owner[ev.ID]
					require.False(t, dup, "round %d: row %s claimed by %d and %d", round, ev.ID, prev, i)
					owner[ev.ID] = i
				}
			}
		}
		require.Len(t, owner, rows, "round %d: the claims together hold every row", round)
		for _, id := range inserted {
			require.Contains(t, owner, id)
		}
		require.Equal(t, rows, countStatus(t, e.db.Pool, "PROCESSING"))
	}
}

// TestClaimPlan checks that the claim walks the partial index of due rows
// rather than every SENT row of a large table (strays: the SENT rows of
// schema version 9 that the sweep has not moved yet).
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	_, err := e.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, status, sent_at)
		SELECT gen_random_uuid(), 'old', 'SENT', now() FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	// 100 due rows, inserted (seq and physical order) newest due first.
	const pending = 100
	specs := make([]spec, pending)
	for i := range specs {
		specs[i] = spec{DueIn: -time.Duration(i+1) * time.Second}
	}
	inserted := insert(t, e.db.Pool, specs...)
	dueOrder := slices.Clone(inserted)
	slices.Reverse(dueOrder)
	_, err = e.db.Pool.Exec(ctx, `ANALYZE outbox_events`)
	require.NoError(t, err)

	t.Run("claim statement scans the due index in due order", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// The real statement, observed through the transaction's own scan
		// counters (no hook into the unexported SQL text is needed): the due
		// index must be scanned and the table never read sequentially. The
		// batch of 100 is the size DESIGN.md measures claims at.
		tx, err := e.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		b, err := e.store.Claim(ctx, tx, lease.ClaimParams{Owner: "w", Limit: pending, Lease: time.Minute})
		require.NoError(t, err)
		var dueScans, tableSeqScans int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('outbox_events_due_idx'::regclass),
			pg_stat_get_xact_numscans('outbox_events'::regclass)`).Scan(&dueScans, &tableSeqScans))
		require.Len(t, b.Events, pending)

		// Both promises are checked before failing, so that one run shows
		// every broken one.
		var broken []string
		if dueScans == 0 {
			broken = append(broken, "the claim did not scan outbox_events_due_idx")
		}
		if tableSeqScans != 0 {
			broken = append(broken, fmt.Sprintf("the claim read the whole table: %d sequential scan(s) of 20,100 rows", tableSeqScans))
		}
		// Batch.Events promises oldest due first, whatever the plan.
		rank := make(map[uuid.UUID]int, pending)
		for i, id := range dueOrder {
			rank[id] = i
		}
		got := make([]int, len(b.Events))
		for i, ev := range b.Events {
			got[i] = rank[ev.ID]
		}
		if !slices.IsSorted(got) {
			broken = append(broken, fmt.Sprintf("the batch is not in due order; due ranks in batch order: %v", got))
		}
		require.Empty(t, broken)
	})

	t.Run("explain uses the due index", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// lease has no exported hook for its claim text, so this is the
		// locking SELECT of the claim CTE in lease/sql.go, written out here.
		// Keep it in step with that file.
		var plan []map[string]any
		require.NoError(t, e.db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON)
SELECT id FROM outbox_events
WHERE status = 'PENDING' AND next_attempt_at <= now()
ORDER BY next_attempt_at, seq
LIMIT 100
FOR UPDATE SKIP LOCKED`, pgx.QueryExecModeSimpleProtocol).Scan(&plan))
		raw, err := json.Marshal(plan)
		require.NoError(t, err)
		var indexes []string
		var seqScan, sort bool
		walkPlan(plan[0]["Plan"].(map[string]any), func(node map[string]any) {
			switch node["Node Type"] {
			case "Seq Scan":
				seqScan = true
			case "Sort", "Incremental Sort":
				sort = true
			}
			if name, ok := node["Index Name"].(string); ok {
				indexes = append(indexes, name)
			}
		})
		require.Contains(t, indexes, "outbox_events_due_idx", "plan: %s", raw)
		require.False(t, seqScan, "plan: %s", raw)
		require.False(t, sort, "the index order should serve ORDER BY; plan: %s", raw)
	})
}

func walkPlan(node map[string]any, visit func(map[string]any)) {
	visit(node)
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		walkPlan(c.(map[string]any), visit)
	}
}

// A row written by other means than Emit, with non-string header values,
// is claimed with those values as JSON text: one odd row must not fail the
// claim of its whole batch.
func TestClaimToleratesNonStringHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := insertDue(t, e.db.Pool, 3)
	_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET headers = '{"n": 1, "s": "x", "o": {"a": true}}' WHERE id = $1`, ids[1])
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(t.Context(), `UPDATE outbox_events SET headers = '[1, 2]' WHERE id = $1`, ids[2])
	require.NoError(t, err)
	b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 3, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, b.Events, 3)
	require.Equal(t, map[string]string{"n": "1", "s": "x", "o": `{"a": true}`}, b.Events[1].Headers)
	require.Nil(t, b.Events[2].Headers)
}

// Renew names at most MaxRefsPerStatement rows per statement and still
// renews every row of a larger set in one call.
func TestRenewLargeSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := lease.MaxRefsPerStatement + 200
	insertDue(t, e.db.Pool, n)
	b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: n, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, b.Events, n)
	renewed, err := e.store.Renew(t.Context(), e.db.Pool, b.Refs(), time.Hour)
	require.NoError(t, err)
	require.Len(t, renewed.Done, n)
}
