package dispatcher_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// crashedLeases leaves n PROCESSING rows of type "crashed.type" whose
// leases expired: what a replica that held n events leaves when it dies.
func crashedLeases(t *testing.T, db *testdb.DB, n int) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO outbox_events (id, event_type, payload, status, lock_token, lock_owner, locked_at, lease_until)
		SELECT gen_random_uuid(), 'crashed.type', '\x7b7d', 'PROCESSING', gen_random_uuid(), 'crashed-replica',
		       now() - interval '1 minute', now() - interval '1 second'
		FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
}

// recoverPass is what one recovery pass reported to the test hook.
type recoverPass struct {
	poll             uint64
	statements, rows int
}

// recoverPasses records the recovery passes of a dispatcher.
type recoverPasses struct {
	mu     sync.Mutex
	passes []recoverPass
	total  int
}

func (r *recoverPasses) add(poll uint64, statements, rows int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes = append(r.passes, recoverPass{poll: poll, statements: statements, rows: rows})
	r.total += rows
}

func (r *recoverPasses) recovered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func (r *recoverPasses) list() []recoverPass {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recoverPass(nil), r.passes...)
}

// A crashed replica's 50,000 expired leases come back in one recovery pass
// at the defaults (RecoverBatchSize 1,000) while the statements come back
// full and the pass's time budget lasts: the dispatcher's clock is frozen
// here, so the budget never runs out and the pass ends on the first
// statement that is not full. One batch per RecoverEvery polls took 50
// passes, about 8 minutes at the defaults.
func TestRecoveryKeepsGoingWhileBatchesAreFull(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	const n = 50_000
	crashedLeases(t, db, n)

	var passes recoverPasses
	cfg := baseConfig(db)
	cfg.RecoverEvery = 1
	dispatcher.SetClock(&cfg, frozenClock())
	dispatcher.SetRecoverHook(&cfg, passes.add)
	d, err := dispatcher.New(db.Pool, cfg) // handles "other.type": the recovered rows stay PENDING
	require.NoError(t, err)
	require.NoError(t, d.Handle("other.type", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)

	waitFor(t, "a recovery pass", func() bool { return len(passes.list()) > 0 })
	first := passes.list()[0]
	require.Equal(t, n, first.rows, "the first pass recovers every expired lease")
	require.Equal(t, n/1000+1, first.statements, "50 full statements of 1,000 and one that finds none")
	require.Equal(t, n, statusCounts(t, db)[outbox.StatusPending])
}

// A recovery pass stops at its time budget (half a PollInterval, by the
// dispatcher's clock), and while the last statement came back full the
// next poll recovers again rather than waiting RecoverEvery polls: here
// every reading of the clock moves it a third of the budget on, so a pass
// runs about three statements, and the passes follow at consecutive polls
// until none is left.
func TestRecoveryPassesFollowEachOtherWhileLeasesRemain(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	const n = 20_000
	crashedLeases(t, db, n)

	var passes recoverPasses
	cfg := baseConfig(db)
	cfg.PollInterval = 60 * time.Millisecond
	cfg.RecoverEvery = 3 // only every third poll is due on its own
	var clock struct {
		sync.Mutex
		at time.Time
	}
	clock.at = time.Now()
	dispatcher.SetClock(&cfg, func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		clock.at = clock.at.Add(cfg.PollInterval / 2 / 3)
		return clock.at
	})
	dispatcher.SetRecoverHook(&cfg, passes.add)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("other.type", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)

	waitFor(t, "every lease recovered", func() bool { return passes.recovered() == n })
	list := passes.list()
	require.Greater(t, len(list), 1, "the time budget ended the first pass")
	for i, p := range list {
		require.LessOrEqual(t, p.statements, 4, "pass %d kept to its budget", i)
		if i > 0 {
			require.Equal(t, list[i-1].poll+1, p.poll, "pass %d followed at the next poll", i)
		}
	}
	require.Equal(t, n, statusCounts(t, db)[outbox.StatusPending])
}

// TestMeasureMassRecovery measures how long a dispatcher at the default
// PollInterval, RecoverEvery and RecoverBatchSize takes to return a
// crashed replica's 50,000 expired leases to PENDING, from its first
// recovery pass to the last, on the real clock. It runs only when
// PGOUTBOX_MEASURE is set:
//
//	PGOUTBOX_MEASURE=1 go test -count=1 -run TestMeasureMassRecovery -v ./dispatcher/
func TestMeasureMassRecovery(t *testing.T) {
	if os.Getenv("PGOUTBOX_MEASURE") == "" {
		t.Skip("a measurement: set PGOUTBOX_MEASURE=1")
	}
	db := testdb.NewMigrated(t)
	const n = 50_000
	crashedLeases(t, db, n)
	_, err := db.Pool.Exec(context.Background(), `VACUUM ANALYZE outbox_events`)
	require.NoError(t, err)

	var passes recoverPasses
	var first, last time.Time
	var mu sync.Mutex
	cfg := dispatcher.Config{Table: db.Table(), Logger: quietLogger()} // the defaults
	dispatcher.SetRecoverHook(&cfg, func(poll uint64, statements, rows int) {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		last = time.Now()
		passes.add(poll, statements, rows)
	})
	d, err := dispatcher.New(db.Pool, cfg) // handles "other.type": the recovered rows stay PENDING
	require.NoError(t, err)
	require.NoError(t, d.Handle("other.type", func(context.Context, outbox.Event) error { return nil }))
	start := time.Now()
	runDispatcher(t, d)
	waitFor(t, "every expired lease recovered", func() bool { return passes.recovered() >= n })
	mu.Lock()
	defer mu.Unlock()
	statements := 0
	for _, p := range passes.list() {
		statements += p.statements
	}
	t.Logf("%d expired leases: first pass %s after start; all PENDING %s after it, in %d passes of %d statements",
		n, first.Sub(start).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond), len(passes.list()), statements)
}
