package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testBundle is one test's migrated inbox in its own schema, with a
// business table "effects" that the work functions write to.
type testBundle struct {
	db  *testdb.DB
	cfg inbox.Config
	ib  *inbox.Inbox
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	cfg := inbox.Config{Table: outbox.Table{Schema: db.Schema}}
	err := db.Pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		return inbox.Migrate(ctx, c.Conn(), cfg)
	})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "CREATE TABLE effects (consumer text NOT NULL, event_id uuid NOT NULL)")
	require.NoError(t, err)
	ib, err := inbox.New(cfg)
	require.NoError(t, err)
	return &testBundle{db: db, cfg: cfg, ib: ib}
}

// newEvent returns an event with a fresh ID and the given payload.
func newEvent(payload string) outbox.Event {
	return outbox.Event{ID: uuid.New(), Type: "order.created", Payload: []byte(payload)}
}

// effect returns work that inserts one business row for (consumer, id) in
// the consumer's tx and counts its calls in calls.
func effect(consumer string, id uuid.UUID, calls *atomic.Int64) inbox.WorkFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		calls.Add(1)
		_, err := tx.Exec(ctx, "INSERT INTO effects (consumer, event_id) VALUES ($1, $2)", consumer, id)
		return err
	}
}

// process runs Process for e in a transaction of its own on pool and
// commits it, or rolls it back when Process fails.
func (b *testBundle) process(t *testing.T, consumer string, e outbox.Event, calls *atomic.Int64) (inbox.Result, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := b.ib.Process(ctx, tx, consumer, e, effect(consumer, e.ID, calls))
	if err != nil {
		require.NoError(t, tx.Rollback(ctx))
		return res, err
	}
	require.NoError(t, tx.Commit(ctx))
	return res, nil
}

// count returns the number of rows sql counts, in committed state.
func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// records returns the number of inbox rows.
func (b *testBundle) records(t *testing.T) int {
	t.Helper()
	return b.count(t, "SELECT count(*) FROM outbox_inbox")
}

// effects returns the number of business rows for (consumer, id).
func (b *testBundle) effects(t *testing.T, consumer string, id uuid.UUID) int {
	t.Helper()
	return b.count(t, "SELECT count(*) FROM effects WHERE consumer = $1 AND event_id = $2", consumer, id)
}

// concurrently runs f(0) … f(n-1) in n goroutines released at once, and
// returns their errors by index.
func concurrently(n int, f func(i int) error) []error {
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}
