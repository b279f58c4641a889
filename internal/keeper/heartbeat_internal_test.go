package keeper

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A beat renews exactly the (id, token) pairs the database holds: the
// claimed event's lease and local deadline move on; an older claim of the
// same event under another token (lost) is not credited by it, and is
// given up.
func TestHeartbeatBeat(t *testing.T) {
	t.Parallel()
	db, b, clock, batch := claimedOnClock(t, 1)
	ctx := context.Background()
	stale := lease.Batch{Token: uuid.New(), Events: batch.Events, Started: []bool{true}}
	old, _ := b.held.Add(context.Background(), stale, clock.Now(), 0)
	held, _ := b.held.Add(context.Background(), batch, clock.Now(), 0)
	require.True(t, b.held.Begin(old[0], 0))

	leaseUntil := func() time.Time {
		var at time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT lease_until FROM outbox_events WHERE id = $1`, batch.Events[0].ID).Scan(&at))
		return at
	}
	before := leaseUntil()
	clock.add(5 * time.Second)
	time.Sleep(10 * time.Millisecond) // the database clock moves on too
	b.keeper(0).beat(context.Background())

	require.True(t, leaseUntil().After(before), "the lease was renewed")
	deadline, lost := b.held.Lease(held[0])
	require.Equal(t, clock.Now().Add(8*time.Second), deadline)
	require.False(t, lost)
	_, lost = b.held.Lease(old[0])
	require.True(t, lost, "the stale claim was credited")
	require.ErrorIs(t, context.Cause(old[0].Context()), outbox.ErrLockLost)
}

// Run beats every third of the lease duration and returns when quit
// ends.
func TestHeartbeatRun(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload) VALUES (gen_random_uuid(), 'x', '\x7b7d')`)
	require.NoError(t, err)
	b := newBundle(t, db.Pool, db.Table(), nil, 1500*time.Millisecond)
	batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: 1, Lease: 1500 * time.Millisecond, Start: 1})
	require.NoError(t, err)
	items, _ := b.held.Add(context.Background(), batch, time.Now(), 0)
	require.True(t, b.held.Begin(items[0], 0))
	first, _ := b.held.Lease(items[0])
	quit, stop := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		b.keeper(0).Run(quit)
		close(returned)
	}()
	testctx.Await(t, "a beat to renew the lease", func() bool {
		deadline, _ := b.held.Lease(items[0])
		return deadline.After(first)
	})
	_, lost := b.held.Lease(items[0]) // under the lock: its deadline timer writes it
	stop()
	budget := testctx.New(t)
	select {
	case <-returned:
	case <-budget.Done():
		t.Fatal("Run did not return when quit ended")
	}
	require.False(t, lost)
}

// A row that another transaction holds locked when the beat renews it
// (busy) is tried again within the beat, not left to the next one: two
// busy beats in a row would cost it its lease. The third connection here
// holds the row until the beat has renewed the other one; the retry comes
// a second later here, 20ms later in production.
func TestHeartbeatRetriesBusyRows(t *testing.T) {
	t.Parallel()
	t.Run("RenewedOnRetry", func(t *testing.T) {
		t.Parallel()
		retryBusyRows(t, false)
	})
	// An item lost between the tries (its local deadline, a completion)
	// is not renewed by the retry: its row must be left to expire.
	t.Run("LostMeanwhileIsNotRenewed", func(t *testing.T) {
		t.Parallel()
		retryBusyRows(t, true)
	})
}

func retryBusyRows(t *testing.T, loseBetweenTries bool) {
	db, b, clock, batch := claimedOnClock(t, 2)
	ctx := context.Background()
	held, _ := b.held.Add(context.Background(), batch, clock.Now(), 0)
	free, locked := batch.Events[0].ID, batch.Events[1].ID
	renewed := func(id uuid.UUID) bool {
		var yes bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT heartbeat_at > locked_at FROM outbox_events WHERE id = $1`, id).Scan(&yes))
		return yes
	}

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE`, locked)
	require.NoError(t, err)
	clock.add(5 * time.Second)
	beaten := make(chan struct{})
	k := b.keeper(time.Second) // time enough to see the first try and let go of the row
	go func() {
		k.beat(context.Background())
		close(beaten)
	}()
	testctx.Await(t, "the free row renewed", func() bool { return renewed(free) })
	require.False(t, renewed(locked))
	if loseBetweenTries {
		b.held.Renewed(held[1:2], lease.RefResult{}, clock.Now()) // neither renewed nor busy: lost
	}
	require.NoError(t, tx.Rollback(ctx))
	budget := testctx.New(t)
	select {
	case <-beaten:
	case <-budget.Done():
		t.Fatal("the beat did not return")
	}
	if loseBetweenTries {
		require.False(t, renewed(locked), "the retry renewed a lost item's row")
		_, lost := b.held.Lease(held[1])
		require.True(t, lost)
		held = held[:1]
	} else {
		require.True(t, renewed(locked), "the busy row was left to the next beat")
	}
	for _, it := range held {
		deadline, lost := b.held.Lease(it)
		require.False(t, lost)
		require.Equal(t, clock.Now().Add(8*time.Second), deadline)
	}
}

// bundle is what a Keeper under test works with: a held set on the
// test's lease clock, the lease store and pool, and a reporter.
type bundle struct {
	held   *held.Set
	store  *lease.Store
	pool   *pgxpool.Pool
	report *report.Reporter
	now    func() time.Time // the lease clock; nil: time.Now
	lease  time.Duration
}

// newBundle is a bundle on pool for table, whose local lease deadlines
// read now (nil: the wall clock).
func newBundle(t *testing.T, pool *pgxpool.Pool, table outbox.Table, now func() time.Time, leaseDuration time.Duration) *bundle {
	t.Helper()
	table = table.WithDefaults()
	store, err := lease.New(table)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := report.New(report.Config{Logger: logger, Table: table.String(), Owner: "t",
		MeterProvider: otel.GetMeterProvider(), TracerProvider: otel.GetTracerProvider(),
		PublishCode: func(error) outbox.Code { return outbox.CodePublishError }})
	return &bundle{held: held.NewSet(clock.New(now), leaseDuration), store: store, pool: pool, report: r, now: now, lease: leaseDuration}
}

// keeper is a Keeper of the bundle, trying busy rows again after
// busyRetry (0: BusyRetry).
func (b *bundle) keeper(busyRetry time.Duration) *Keeper {
	return New(Config{
		Ctx: context.Background(), Held: b.held, Store: b.store, Pool: b.pool, Report: b.report,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Table: "outbox_events", Owner: "t",
		Clock: clock.New(b.now), Lease: b.lease,
		OpTimeout: min(b.lease/2, 30*time.Second), AtLeastOnce: true, BusyRetry: busyRetry,
	})
}

// claimedOnClock is a bundle with a 10s lease on a fake clock, and its
// claim of n new events, all marked started.
func claimedOnClock(t *testing.T, n int) (*testdb.DB, *bundle, *fakeClock, lease.Batch) {
	t.Helper()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload) SELECT gen_random_uuid(), 'x', '\x7b7d' FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
	clock := &fakeClock{now: time.Now()}
	b := newBundle(t, db.Pool, db.Table(), clock.Now, 10*time.Second)
	batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: n, Lease: 10 * time.Second, Start: n})
	require.NoError(t, err)
	require.Len(t, batch.Events, n)
	return db, b, clock, batch
}

// fakeClock is a local clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
