package pgoutboxtest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

// config is a dispatcher configuration for b's table that logs nothing.
func (b *testBundle) config() dispatcher.Config {
	return dispatcher.Config{Table: b.table, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func TestDispatchUntilIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ClaimsFollowUpsWithoutWaitingForAPoll", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("order.placed", "1", `{}`))
		cfg := b.config()
		cfg.PollInterval = time.Hour           // the follow-up must not wait for a poll,
		cfg.Wakeup = dispatcher.WakeupDisabled // nor for a notification
		placed := func(ctx context.Context, e outbox.Event) error {
			tx, err := b.db.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := b.emitter.Emit(ctx, tx, jsonEvent("order.shipped", e.AggregateID, `{}`)); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
		shipped := func(context.Context, outbox.Event) error { return nil }
		res := pgoutboxtest.DispatchUntilIdle(ctx, t, b.db.Pool, cfg,
			map[string]outbox.Handler{"order.placed": placed, "order.shipped": shipped})
		require.Equal(t, int64(2), res.Counts.Sent)
		pgoutboxtest.RequireManyEmitted(ctx, t, b.db.Pool, b.table,
			pgoutboxtest.Want{Type: "order.placed", Status: outbox.StatusSent},
			pgoutboxtest.Want{Type: "order.shipped", AggregateID: "1", Status: outbox.StatusSent})
	})

	t.Run("DeliversEveryDueEventAndStops", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("a", "1", `{}`), jsonEvent("a", "2", `{}`), jsonEvent("b", "3", `{}`))
		var calls atomic.Int32
		h := func(context.Context, outbox.Event) error { calls.Add(1); return nil }
		res := pgoutboxtest.DispatchUntilIdle(ctx, t, b.db.Pool, b.config(), map[string]outbox.Handler{"a": h, "b": h})
		require.Equal(t, int32(3), calls.Load())
		require.Equal(t, int64(3), res.Counts.Sent)
		require.Equal(t, int64(3), res.Counts.Total())
		require.Equal(t, uint64(3), res.Stats.Sent)
		require.Equal(t, 0, res.Stats.InFlight)
	})

	t.Run("FailsOnABadConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.BatchSize = 1_000_000
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, cfg, nil)
		})
		require.Contains(t, msg, "DispatchUntilIdle: dispatcher.New: ")
		require.Contains(t, msg, "BatchSize")
	})

	t.Run("FailsOnANilHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, b.config(), map[string]outbox.Handler{"a": nil})
		})
		require.Contains(t, msg, `DispatchUntilIdle: handler for "a": `)
	})

	t.Run("FailsWhenTheDispatcherCannotStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.Table.Name = "missing"
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, cfg, nil)
		})
		require.Contains(t, msg, "DispatchUntilIdle: the dispatcher stopped before "+cfg.Table.String()+" was idle: ")
		require.Contains(t, msg, "does not exist")
	})

	t.Run("FailsWhenTheTableIsNotIdleInTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stuck := b.emit(t, jsonEvent("slow", "1", `{}`))[0]
		cfg := b.config()
		cfg.DrainTimeout = 50 * time.Millisecond
		// The context ends once the handler runs (its deadline, as if it
		// passed then), however long a loaded machine took to get there.
		started := make(chan struct{})
		markStarted := sync.OnceFunc(func() { close(started) })
		slow := func(ctx context.Context, _ outbox.Event) error {
			markStarted()
			<-ctx.Done()
			return ctx.Err()
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		var ended atomic.Int64
		go func() {
			<-started
			ended.Store(time.Now().UnixNano())
			cancel(context.DeadlineExceeded)
		}()
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, cfg, map[string]outbox.Handler{"slow": slow})
		})
		require.Less(t, time.Since(time.Unix(0, ended.Load())), 5*time.Second, "it returns soon after the context ends")
		require.Contains(t, msg, b.table.String()+" not idle when the context ended (context deadline exceeded)")
		require.Contains(t, msg, "0 PENDING (0 due), 1 PROCESSING, 0 SENT, 0 FAILED")
		require.Contains(t, msg, "the first 1 events due or in flight:\n    seq 1  id "+stuck.ID.String())
		// The dispatcher stopped: the handler's attempt was recorded.
		pgoutboxtest.RequireEmitted(context.Background(), t, b.db.Pool, b.table, pgoutboxtest.Want{Type: "slow", Status: outbox.StatusPending})
	})

	t.Run("StopsWithinItsGraceWhenDrainTimeoutIsUnset", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("slow", "1", `{}`))
		slow := func(ctx context.Context, _ outbox.Event) error { <-ctx.Done(); return ctx.Err() }
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, b.config(), map[string]outbox.Handler{"slow": slow})
		})
		require.Less(t, time.Since(start), 5*time.Second, "the helper's drain is short")
		require.Contains(t, msg, "not idle when the context ended")
		// Run had returned when the helper did: the attempt was recorded.
		pgoutboxtest.RequireEmitted(context.Background(), t, b.db.Pool, b.table,
			pgoutboxtest.Want{Type: "slow", Status: outbox.StatusPending})
	})

	t.Run("NamesAHandlerThatIgnoresItsContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("stubborn", "1", `{}`))
		release, started := make(chan struct{}), make(chan struct{})
		startedOnce := sync.OnceFunc(func() { close(started) })
		stubborn := func(context.Context, outbox.Event) error { startedOnce(); <-release; return nil }
		cfg := b.config()
		cfg.DrainTimeout = 10 * time.Millisecond
		// The run ends once the handler has started (a fixed deadline
		// could pass before it did on a loaded machine).
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { <-started; cancel() }()
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, cfg, map[string]outbox.Handler{"stubborn": stubborn})
		})
		close(release)
		require.Contains(t, msg, `a handler ignores its context: the handler for "stubborn" was still running`)
		// Let the dispatcher left behind record the outcome and return.
		testctx.Await(t, "the stubborn event to be SENT", func() bool {
			n, err := testdb.CountStatus(context.Background(), b.db.Pool, b.table, outbox.StatusSent)
			return err == nil && n == 1
		})
	})

	t.Run("FailsWhenAnEventHasNoHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("order.placed", "1", `{}`), jsonEvent("order.paid", "2", `{}`))
		h := func(context.Context, outbox.Event) error { return nil }
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, b.config(),
				map[string]outbox.Handler{"order.placd": h, "order.paid": h})
		})
		require.Contains(t, msg, `1 event left PENDING: no handler matched their types ("order.placed")`)
		require.Contains(t, msg, `handlers are registered for "order.paid", "order.placd"`)
	})

	t.Run("FailsWhenAnEventCannotBeRouted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("order.placed", "1", `{}`), jsonEvent("order.paid", "2", `{}`))
		cfg := b.config()
		cfg.Publisher = okPublisher{}
		cfg.RouteFunc = func(e outbox.Event) string {
			if e.Type == "order.paid" {
				return "payments"
			}
			return ""
		}
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.DispatchUntilIdle(ctx, tb, b.db.Pool, cfg, nil)
		})
		require.Contains(t, msg, `left PENDING, not routed: RouteFunc gave them no destination and no handler matched their types ("order.placed")`)
		var status string
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT status FROM "+testdb.AllRows(b.table)+
			" AS e WHERE event_type = 'order.placed'").Scan(&status))
		require.Equal(t, string(outbox.StatusPending), status, "never dead-lettered")
	})

	t.Run("LeavesFailuresToTheCaller", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("a", "1", `{}`), jsonEvent("b", "2", `{}`))
		cfg := b.config()
		cfg.Backoff = outbox.Backoff{Initial: time.Hour}
		res := pgoutboxtest.DispatchUntilIdle(ctx, t, b.db.Pool, cfg, map[string]outbox.Handler{
			"a": func(context.Context, outbox.Event) error { return outbox.Permanent(errors.New("no")) },
			"b": func(context.Context, outbox.Event) error { return errors.New("later") },
		})
		require.Equal(t, int64(1), res.Counts.Failed)
		require.Equal(t, int64(1), res.Counts.Pending, "a retry due in an hour counts as idle")
		require.Equal(t, int64(0), res.Counts.Due)
		require.Equal(t, uint64(1), res.Stats.Retried)
	})

	t.Run("ReturnsAtOnceOnAnEmptyTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := pgoutboxtest.DispatchUntilIdle(ctx, t, b.db.Pool, b.config(), nil)
		require.Equal(t, int64(0), res.Counts.Total())
		require.Positive(t, res.Stats.ClaimCycles)
	})
}

// okPublisher publishes every message successfully.
type okPublisher struct{}

func (okPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}
