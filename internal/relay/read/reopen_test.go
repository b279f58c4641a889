package read_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/read"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// refuseStream is the test database, except that its first stream
// statement (the events statement without a limit) fails, after failed
// is signalled and proceed closed.
type refuseStream struct {
	store.DB
	once            sync.Once
	failed, proceed chan struct{}
}

func (d *refuseStream) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	refuse := false
	if strings.Contains(sql, "pg_visible_in_snapshot") && !strings.Contains(sql, "LIMIT") {
		d.once.Do(func() { refuse = true })
	}
	if refuse {
		close(d.failed)
		<-d.proceed
		return nil, errors.New("test: stream refused")
	}
	return d.DB.Query(ctx, sql, args...)
}

// TestAStreamThatFailedToOpenIsNotALostLease: Store.Stream records the
// batch's target before its statement runs. When the statement fails and a
// newer tick is recorded meanwhile, the reader must not open the batch
// again from its old cursor (no target): the new target differs from the
// recorded one, the open is refused and the lease reported lost, although
// nobody else took it.
func TestAStreamThatFailedToOpenIsNotALostLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := &refuseStream{DB: e.db.Pool, failed: make(chan struct{}), proceed: make(chan struct{})}
	s, err := store.New(db, e.table)
	require.NoError(t, err)
	pub := newFake()
	var mu sync.Mutex
	var lost []error
	r := read.New(read.Config{Store: s, Lanes: pub, Group: "g", Owner: "r", Lease: time.Minute,
		PollInterval: 5 * time.Millisecond, Wake: e.wake,
		OnError: func(err error) {
			if errors.Is(err, store.ErrLeaseLost) {
				mu.Lock()
				lost = append(lost, err)
				mu.Unlock()
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("reader: %v", err)
		}
	})

	first := relaytest.Emit(t, e.db.Pool, "k", 1)
	select {
	case <-db.failed:
	case <-t.Context().Done():
		t.Fatal("test ended")
	}
	second := relaytest.Emit(t, e.db.Pool, "k", 1)
	e.waitTicked(t, second[0]) // a newer target than the one recorded
	close(db.proceed)

	waitPublished(t, pub, 2)
	require.Equal(t, append(first, second...), publishedIDs(pub)[:2])
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, lost, "no one else took the lease")
}
