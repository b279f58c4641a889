package read_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/read"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// noMove is the test database, except that no cursor move can commit:
// the move's UPDATE of last_tick fails (alone or in a transaction), every
// other statement works.
type noMove struct{ *pgxpool.Pool }

func (noMove) Begin(context.Context) (pgx.Tx, error) { return nil, errors.New("test: no transaction") }

func (d noMove) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "SET last_tick") {
		return pgconn.CommandTag{}, errors.New("test: no move")
	}
	return d.Pool.Exec(ctx, sql, args...)
}

// TestAMoveThatKeepsFailingIsRetriedWithBackoff: when the cursor move of
// a published batch fails for a reason other than a lost lease, the reader
// takes its lease again and republishes the batch, but only after a pause
// that doubles while nothing moves. Without it, a failure that repeats (a
// missing grant, a statement timeout) republished the same batch as fast
// as the database answered: unbounded duplicates and errors.
func TestAMoveThatKeepsFailingIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failing, err := store.New(noMove{e.db.Pool}, e.table)
	require.NoError(t, err)
	const poll = 20 * time.Millisecond
	fails := make(chan time.Time, 100)
	pub := newFake()
	r := read.New(read.Config{Store: failing, Lanes: pub, Group: "g", Owner: "r", Lease: time.Minute,
		PollInterval: poll, Wake: e.wake,
		OnError: func(error) {
			select {
			case fails <- time.Now():
			default:
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
	relaytest.Emit(t, e.db.Pool, "k", 1)

	var at []time.Time
	for len(at) < 5 {
		select {
		case f := <-fails:
			at = append(at, f)
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
	// Each pause is at least twice the one before (a loaded machine only
	// makes them longer): 20, 40, 80, 160 ms.
	for i := 1; i < len(at); i++ {
		require.GreaterOrEqual(t, at[i].Sub(at[i-1]), poll<<(i-1), "pause %d", i)
	}
	require.LessOrEqual(t, len(pub.snapshot()), len(at)+1, "one publish of the batch per failure")
}
