package emitter_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestExecModes emits by INSERT (one event as a VALUES row, and several
// from arrays) and by COPY (with and without delays) in each pgx query exec mode,
// directly and through PgBouncer in transaction mode, and reads the rows
// back.
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, r testdb.Route) {
		ctx := context.Background()
		b := setup(t, emitter.Config{})
		pool := b.db.RoutePool(t, r, 2)

		delayed := validEvent()
		delayed.Delay = time.Hour
		copied := manyEvents(5000, 0) // COPY takes batches this large
		copied[1] = fullEvent()
		copiedDelayed := manyEvents(5000, time.Hour) // COPY reads now() first
		copiedDelayed[1] = fullEvent()
		// fullEvent is second in every batch of several.
		batches := [][]outbox.Event{{delayed, fullEvent()}, copied, copiedDelayed}
		for _, ev := range []outbox.Event{fullEvent(), fullEvent(), delayed, delayed} { // prepared, then cached
			ids := emitVia(t, pool, b.emitter, ev)
			require.Equal(t, ev.Delay > 0, b.outboxCount(t,
				"id = $1 AND next_attempt_at > now() + interval '59 minutes'", ids[0]) == 1)
			if ev.Delay == 0 {
				require.Equal(t, ev, b.readEvent(t, ids[0]))
			}
		}
		logB := setupKind(t, outbox.KindLog, emitter.Config{})
		logPool := logB.db.RoutePool(t, r, 2)
		for _, events := range [][]outbox.Event{{fullEvent()}, {fullEvent()}, {validEvent(), fullEvent()}} {
			ids := emitVia(t, logPool, logB.emitter, events...)
			require.Equal(t, fullEvent(), logB.readEvent(t, ids[len(ids)-1]))
		}
		for _, events := range batches {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(ctx) }) // before the pool closes
			ids, err := b.emitter.Emit(ctx, tx, events...)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, len(events), b.outboxCount(t, "id = ANY($1)", ids))
			require.Equal(t, fullEvent(), b.readEvent(t, ids[1]))
			delayedCount := 0
			for _, ev := range events {
				if ev.Delay > 0 {
					delayedCount++
				}
			}
			require.Equal(t, delayedCount, b.outboxCount(t,
				"id = ANY($1) AND next_attempt_at > now() + interval '59 minutes'", ids))
		}
	})
}

// emitVia emits events in a transaction of pool, commits, and returns
// their IDs.
func emitVia(t *testing.T, pool *pgxpool.Pool, e *emitter.Emitter, events ...outbox.Event) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ids, err := e.Emit(ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return ids
}
