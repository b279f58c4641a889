package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestSuspectsRunOneAtATimeMarkedRightBefore: events recovered before
// (suspects: a poison event's worker died with them) are not marked
// started by their claim, and their handlers run one at a time, each
// marked right before it: while one suspect runs, no other suspect's row
// shows a started attempt. So a poison event that kills its process
// charges a recovery to no suspect but itself, and innocents recovered
// with it are not dead-lettered with it after MaxRecoveries deaths. An
// event never recovered runs beside them as usual.
func TestSuspectsRunOneAtATimeMarkedRightBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	suspects := insertEvents(t, db, "t", 3)
	normal := insertEvents(t, db, "t", 1)[0]
	_, err := db.Pool.Exec(ctx, `UPDATE outbox_events SET recoveries = 1 WHERE id = ANY($1)`, suspects)
	require.NoError(t, err)

	var mu sync.Mutex
	running, most := 0, 0
	var problems []string
	returned := map[uuid.UUID]bool{}
	done := make(chan uuid.UUID, 4)
	cfg := baseConfig(db)
	cfg.Concurrency, cfg.BatchSize = 4, 10 // the claim would mark all 4 and start them together
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("t", func(ctx context.Context, e outbox.Event) error {
		defer func() { done <- e.ID }()
		if e.ID == normal {
			return nil
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		rows, err := db.Pool.Query(ctx, `SELECT id FROM outbox_events WHERE id = ANY($1) AND started_at IS NOT NULL`, suspects)
		require.NoError(t, err)
		marked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		time.Sleep(30 * time.Millisecond) // long enough for another suspect to start beside it
		mu.Lock()
		defer mu.Unlock()
		running--
		for _, id := range marked {
			if id != e.ID && !returned[id] { // a returned one shows its mark until its outcome is written
				problems = append(problems, "a suspect ran while another suspect showed a started attempt")
			}
		}
		returned[e.ID] = true
		return err
	}))
	runDispatcher(t, d)
	for range 4 {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the events were not all handled")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, most, "suspects ran beside each other")
	require.Empty(t, problems)
}
