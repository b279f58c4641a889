package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// recordingPublisher records what it is given and fails the events whose
// IDs it is told to.
type recordingPublisher struct {
	mu       sync.Mutex
	msgs     []outbox.Message
	calls    int
	failWith map[[16]byte]error
}

func (p *recordingPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.msgs = append(p.msgs, msgs...)
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		errs[i] = p.failWith[m.Event.ID]
	}
	return errs
}

func (p *recordingPublisher) published() []outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]outbox.Message(nil), p.msgs...)
}

// Stop lets an in-flight handler finish, returns claimed events that never
// started to PENDING, and returns the same result as Run.
func TestGracefulStopDrainsAndReleases(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	all := insertEvents(t, db, "slow", 6)
	pub := &recordingPublisher{}
	started := make(chan uuid.UUID, len(all))
	cfg := baseConfig(db)
	cfg.Concurrency = 1 // one event runs; the other five wait for its slot
	cfg.Publisher = pub
	cfg.RouteFunc = func(outbox.Event) string { return "" }
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	var finished atomic.Bool
	require.NoError(t, d.Handle("slow", func(ctx context.Context, e outbox.Event) error {
		started <- e.ID
		time.Sleep(300 * time.Millisecond)
		finished.Store(true)
		return ctx.Err()
	}))
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	slow := <-started // the batch holds slow (running) and five events waiting for it

	ctx := testctx.New(t)
	require.NoError(t, d.Stop(ctx))
	require.NoError(t, <-errc)
	require.NoError(t, d.Stop(ctx), "Stop is idempotent")
	require.ErrorIs(t, d.Run(ctx), dispatcher.ErrStopped, "a dispatcher runs once")

	require.True(t, finished.Load())
	require.Len(t, started, 0, "no other handler started")
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, slow))
	for _, id := range all {
		if id != slow {
			require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, id))
		}
	}
	require.Empty(t, pub.published())
	st := d.Stats()
	require.Equal(t, uint64(5), st.Released)
	require.Zero(t, st.InFlight)
}

// Past the drain timeout, handlers are cancelled and their events return to
// PENDING without spending an attempt; Run and Stop report ErrDrainTimeout.
func TestStopCancelsHandlersAfterDrainTimeout(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	cfg := baseConfig(db)
	cfg.DrainTimeout = 50 * time.Millisecond
	started := make(chan struct{})
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(ctx context.Context, e outbox.Event) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}))
	runCtx, stopRun := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(runCtx) }()
	<-started
	stopRun()
	require.ErrorIs(t, <-errc, dispatcher.ErrDrainTimeout)
	require.ErrorIs(t, d.Stop(context.Background()), dispatcher.ErrDrainTimeout)
	require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, id))
}

func TestStopBeforeRun(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	d, err := dispatcher.New(db.Pool, baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Stop(context.Background()))
	require.NoError(t, d.Run(context.Background()), "a stop before Run is a clean stop")
	require.ErrorIs(t, d.Start(context.Background()), dispatcher.ErrStopped)
	require.ErrorIs(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }), dispatcher.ErrStarted)
}

func TestRunFailsWithoutTable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // not migrated
	d, err := dispatcher.New(db.Pool, dispatcher.Config{Table: db.Table(), Logger: quietLogger()})
	require.NoError(t, err)
	err = d.Run(context.Background())
	require.ErrorIs(t, err, outbox.ErrMissingTable)
	require.ErrorContains(t, err, db.Table().String())
}

// The publisher gets one call per batch with each event's destination, and
// each event gets its own outcome. An event the publisher cannot carry
// (its error matches outbox.ErrInvalidEvent) is recorded as invalid_event.
func TestPublisherOutcomesPerEvent(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "order.created", 5)
	pub := &recordingPublisher{failWith: map[[16]byte]error{
		ids[1]: errors.New("broker busy"),
		ids[2]: outbox.Permanent(errors.New("message too large")),
		ids[4]: outbox.Permanent(fmt.Errorf("broker: %w", &outbox.ValidationError{Field: "Headers", Reason: "name \"x/y\" is not a token"})),
	}}
	cfg := baseConfig(db)
	cfg.Publisher = pub
	cfg.MaxAttempts = 2
	cfg.RouteFunc = func(e outbox.Event) string { return "orders." + e.Type }
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	runDispatcher(t, d)
	waitFor(t, "all final", func() bool {
		c := statusCounts(t, db)
		return c[outbox.StatusSent]+c[outbox.StatusFailed] == 5
	})
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, ids[0]))
	require.Equal(t, row{Status: outbox.StatusFailed, Attempts: 2, Code: "publish_error"}, readRow(t, db, ids[1]))
	require.Equal(t, row{Status: outbox.StatusFailed, Attempts: 1, Code: "publish_error"}, readRow(t, db, ids[2]))
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, ids[3]))
	require.Equal(t, row{Status: outbox.StatusFailed, Attempts: 1, Code: "invalid_event"}, readRow(t, db, ids[4]))
	for _, m := range pub.published() {
		require.Equal(t, "orders.order.created", m.Destination)
		require.Equal(t, []byte("{}"), m.Event.Payload)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Equal(t, 2, pub.calls, "one call for the batch, one for the retry")
}

func TestHandleRejectsBadRegistrations(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	d, err := dispatcher.New(db.Pool, baseConfig(db))
	require.NoError(t, err)
	ok := func(context.Context, outbox.Event) error { return nil }
	require.NoError(t, d.Handle("x", ok))
	for name, tc := range map[string]struct {
		call  func() error
		field string
	}{
		"duplicate":  {func() error { return d.Handle("x", ok) }, "eventType"},
		"empty type": {func() error { return d.Handle(" ", ok) }, "eventType"},
		"nil":        {func() error { return d.Handle("y", nil) }, "h"},
	} {
		err := tc.call()
		var ierr *outbox.InputError
		require.ErrorAs(t, err, &ierr, name)
		require.Equal(t, tc.field, ierr.Field, name)
		require.ErrorIs(t, err, outbox.ErrInvalidInput, name)
		require.NotErrorIs(t, err, outbox.ErrInvalidConfig, name)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	tests := map[string]func(*dispatcher.Config){
		"Backoff.Initial":    func(c *dispatcher.Config) { c.Backoff.Initial = time.Nanosecond },
		"Backoff.Jitter":     func(c *dispatcher.Config) { c.Backoff.Jitter = 2 },
		"Backoff.Max":        func(c *dispatcher.Config) { c.Backoff.Max = 8 * 24 * time.Hour },
		"Backoff.Multiplier": func(c *dispatcher.Config) { c.Backoff.Multiplier = 0.5 },
		"BatchSize":          func(c *dispatcher.Config) { c.BatchSize = 10_001 },
		"Claimers":           func(c *dispatcher.Config) { c.Claimers = 17 },
		"Concurrency":        func(c *dispatcher.Config) { c.Concurrency = -1 },
		"Delivery":           func(c *dispatcher.Config) { c.Delivery = 7 },
		"DrainTimeout":       func(c *dispatcher.Config) { c.DrainTimeout = 2 * time.Hour },
		"HandlerTimeout":     func(c *dispatcher.Config) { c.HandlerTimeout = -5 },
		"HeadPolicy":         func(c *dispatcher.Config) { c.HeadPolicy = dispatcher.SkipFailed }, // needs PerKey
		"LeaseDuration":      func(c *dispatcher.Config) { c.LeaseDuration = 10 * time.Millisecond },
		"MaxAttempts":        func(c *dispatcher.Config) { c.MaxAttempts = 1001 },
		"MaxRecoveries":      func(c *dispatcher.Config) { c.MaxRecoveries = -1 },
		"Ordering":           func(c *dispatcher.Config) { c.Ordering = 2 },
		"Owner":              func(c *dispatcher.Config) { c.Owner = string(make([]byte, 201)) },
		"PollInterval":       func(c *dispatcher.Config) { c.PollInterval = time.Millisecond },
		"PublishTimeout":     func(c *dispatcher.Config) { c.PublishTimeout = -1 },
		"RecoverBatchSize":   func(c *dispatcher.Config) { c.RecoverBatchSize = 100_001 },
		"RecoverEvery":       func(c *dispatcher.Config) { c.RecoverEvery = 1001 },
		"Table":              func(c *dispatcher.Config) { c.Table.Name = "Bad-Name" },
	}
	for option, mutate := range tests {
		cfg := baseConfig(db)
		mutate(&cfg)
		_, err := dispatcher.New(db.Pool, cfg)
		var ce *outbox.ConfigError
		require.ErrorAs(t, err, &ce, option)
		require.Equal(t, option, ce.Field)
		require.ErrorContains(t, err, option)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
	}
	_, err := dispatcher.New(nil, baseConfig(db))
	var ie *outbox.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "pool", ie.Field)
}

// An Owner that PostgreSQL text cannot hold would make every claim fail
// (SQLSTATE 22021) and leave events PENDING forever: New refuses it.
func TestNewRejectsOwnerThatIsNotText(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	for name, owner := range map[string]string{
		"InvalidUTF8": "worker-\xff",
		"NUL":         "worker-\x00-1",
		"TooLong":     strings.Repeat("é", 101),
	} {
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig(db)
			cfg.Owner = owner
			_, err := dispatcher.New(db.Pool, cfg)
			var ce *outbox.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "Owner", ce.Field)
			require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		})
	}
	cfg := baseConfig(db)
	cfg.Owner = strings.Repeat("é", 100) // 200 bytes of UTF-8: the limit
	_, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
}

// The dispatcher runs at most Concurrency handlers at once and holds at
// most Concurrency + Claimers × BatchSize events; a stop returns those still
// waiting for a handler slot to PENDING.
func TestConcurrencyBoundsHandlersAndStopReleasesWaiters(t *testing.T) {
	t.Parallel()
	for _, claimers := range []int{1, 2} {
		t.Run(fmt.Sprintf("claimers=%d", claimers), func(t *testing.T) {
			t.Parallel()
			const events, concurrency, batch = 20, 2, 4
			held := concurrency + claimers*batch
			db := testdb.NewMigrated(t)
			insertEvents(t, db, "x", events)
			cfg := baseConfig(db)
			cfg.Concurrency, cfg.BatchSize, cfg.Claimers = concurrency, batch, claimers
			var running, most atomic.Int32
			started := make(chan struct{}, events)
			release := make(chan struct{})
			d, err := dispatcher.New(db.NewPool(t, 4), cfg)
			require.NoError(t, err)
			require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				started <- struct{}{}
				<-release
				running.Add(-1)
				return nil
			}))
			errc := make(chan error, 1)
			go func() { errc <- d.Run(context.Background()) }()
			<-started
			<-started
			waitFor(t, "batches claimed ahead", func() bool { return d.Stats().InFlight == held })
			for range 20 { // claims keep coming back full: the bound must hold
				polls := d.Stats().PollCycles
				d.Trigger()
				// The trigger and a poll (every 20ms) each ask for a claim;
				// once the poll after the next one has begun, both have
				// been handled (one coordinator goroutine), and any claim
				// they started has had a poll interval to come back.
				waitFor(t, "the trigger and a poll handled", func() bool { return d.Stats().PollCycles >= polls+2 })
				require.Equal(t, held, d.Stats().InFlight)
			}
			require.Equal(t, int32(concurrency), most.Load(), "no more than Concurrency handlers at once")

			stopped := make(chan error, 1)
			go func() { stopped <- d.Stop(context.Background()) }()
			waitFor(t, "the waiting events released", func() bool {
				return d.Stats().Released == uint64(held-concurrency)
			})
			close(release)
			require.NoError(t, <-stopped)
			require.NoError(t, <-errc)
			require.Equal(t, int32(concurrency), most.Load())
			require.Equal(t, map[outbox.Status]int{outbox.StatusSent: concurrency, outbox.StatusPending: events - concurrency},
				statusCounts(t, db))
		})
	}
}

// blockingPublisher signals each call and blocks until its context ends.
type blockingPublisher struct{ called chan struct{} }

func (p *blockingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	p.called <- struct{}{}
	<-ctx.Done()
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return errs
}

// A hard stop releases events whose publish it cancelled, without spending
// an attempt, even when their handlers' timeouts had passed meanwhile (the
// batch's publish starts after its last handler).
func TestHardStopDuringPublishReleases(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "x", 2)
	cfg := baseConfig(db)
	cfg.Concurrency, cfg.Claimers = 1, 1
	cfg.HandlerTimeout = 100 * time.Millisecond
	cfg.DrainTimeout = 50 * time.Millisecond
	pub := &blockingPublisher{called: make(chan struct{}, 1)}
	cfg.Publisher = pub
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		time.Sleep(70 * time.Millisecond) // the second ends past the first's timeout
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	<-pub.called
	cancel()
	require.ErrorIs(t, <-errc, dispatcher.ErrDrainTimeout)
	for _, id := range ids {
		require.Equal(t, row{Status: outbox.StatusPending}, readRow(t, db, id))
	}
}

// A handler's context ends when the handler returns.
func TestHandlerContextEndsOnReturn(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "x", 1)
	kept := make(chan context.Context, 1)
	d, err := dispatcher.New(db.NewPool(t, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(ctx context.Context, _ outbox.Event) error {
		kept <- ctx
		return nil
	}))
	runDispatcher(t, d)
	ctx := <-kept
	receive(t, "the handler's context to end after the handler", ctx.Done())
}

// With Concurrency 1, the handlers of one batch run in claim order: slots
// are taken in the batch's order. (Across batches claimed ahead the order
// is not kept yet.)
func TestConcurrencyOneRunsBatchInClaimOrder(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "x", 20)
	var mu sync.Mutex
	var got []uuid.UUID
	cfg := baseConfig(db)
	cfg.Concurrency = 1
	cfg.BatchSize = 20
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		mu.Lock()
		got = append(got, e.ID)
		mu.Unlock()
		return nil
	}))
	runDispatcher(t, d)
	waitFor(t, "every event handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(ids)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, ids, got)
}

// Start or Run during the drain returns ErrStopped: the dispatcher is
// stopping, not running.
func TestStartWhileStopping(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "x", 1)
	d, err := dispatcher.New(db.NewPool(t, 4), baseConfig(db))
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		close(started)
		<-release
		return nil
	}))
	require.NoError(t, d.Start(context.Background()))
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(context.Background()) }()
	waitFor(t, "the drain", func() bool { return d.Health().State == dispatcher.StateStopping })
	require.ErrorIs(t, d.Start(context.Background()), dispatcher.ErrStopped)
	require.ErrorIs(t, d.Run(context.Background()), dispatcher.ErrStopped)
	close(release)
	require.NoError(t, <-stopped)
	require.ErrorIs(t, d.Run(context.Background()), dispatcher.ErrStopped, "a dispatcher that ran, runs once")
}
