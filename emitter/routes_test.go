package emitter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestExecModes emits by INSERT and by COPY (with and without delays) in each pgx query exec mode,
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
		// fullEvent is second in every batch.
		for _, events := range [][]outbox.Event{{delayed, fullEvent()}, copied, copiedDelayed} {
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
