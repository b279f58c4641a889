package dispatcher_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestFourDispatchersDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	const n = 10_000
	ids := insertEvents(t, db, "order.created", n)
	log := newCallLog()
	for i := 0; i < 4; i++ {
		cfg := baseConfig(db)
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("order.created", func(ctx context.Context, e outbox.Event) error {
			log.enter(e.ID)
			defer log.exit(e.ID)
			return nil
		}))
		runDispatcher(t, d)
	}
	waitFor(t, "every event SENT", func() bool {
		return statusCounts(t, db)[outbox.StatusSent] == n
	})
	for _, id := range ids {
		require.Equal(t, 1, log.count(id), "calls for %s", id)
	}
	require.Empty(t, log.overlap)
}
