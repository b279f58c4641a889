package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// hookEnv is one event, due for a while already, and a dispatcher whose
// OnOutcome records what it receives.
type hookEnv struct {
	db       *testdb.DB
	id       uuid.UUID
	outcomes *outcomeLog
}

// startHookEnv runs h as the handler of the event, which has been due for
// 2s (database clock) when the dispatcher starts, after the optional
// update of its row (SET clause).
func startHookEnv(t *testing.T, configure func(*dispatcher.Config), h outbox.Handler, update ...string) hookEnv {
	t.Helper()
	e := hookEnv{db: testdb.NewMigrated(t), outcomes: &outcomeLog{}}
	e.id = insertEvents(t, e.db, "x", 1)[0]
	_, err := e.db.Pool.Exec(context.Background(), `UPDATE outbox_events SET next_attempt_at = now() - interval '2 seconds'`)
	require.NoError(t, err)
	for _, set := range update {
		_, err := e.db.Pool.Exec(context.Background(), `UPDATE outbox_events SET `+set)
		require.NoError(t, err)
	}
	cfg := baseConfig(e.db)
	cfg.OnOutcome = e.outcomes.add
	if configure != nil {
		configure(&cfg)
	}
	d, err := dispatcher.New(e.db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	if h != nil {
		require.NoError(t, d.Handle("x", h))
	}
	runDispatcher(t, d)
	return e
}

func dbNow(t *testing.T, db *testdb.DB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

func nextAttemptAt(t *testing.T, db *testdb.DB, id uuid.UUID) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT next_attempt_at FROM outbox_events WHERE id = $1`, id).Scan(&at))
	return at
}

// requireTimings checks that the outcome saw the 2s the event was due
// before the dispatcher started, and a run of at least 50ms.
func requireTimings(t *testing.T, o dispatcher.Outcome) {
	t.Helper()
	require.GreaterOrEqual(t, o.QueueWait, 2*time.Second, "queue wait from the due time")
	require.Less(t, o.QueueWait, 10*time.Second)
	require.GreaterOrEqual(t, o.RunDuration, 50*time.Millisecond)
	require.Less(t, o.RunDuration, 5*time.Second)
}

func TestOutcomeFields(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	slowly := func(err error) outbox.Handler {
		return func(context.Context, outbox.Event) error {
			time.Sleep(50 * time.Millisecond)
			return err
		}
	}

	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		e := startHookEnv(t, nil, slowly(outbox.Permanent(errBoom)))
		o := e.outcomes.wait(t, e.id, 1)[0]
		require.Equal(t, outbox.StatusFailed, o.Status)
		require.Equal(t, outbox.CodeHandlerError, o.Code)
		require.ErrorIs(t, o.Err, errBoom)
		require.False(t, o.Snoozed)
		require.True(t, o.NextAttemptAt.IsZero())
		require.Equal(t, 1, o.Event.Attempt)
		requireTimings(t, o)
	})

	t.Run("retry", func(t *testing.T) {
		t.Parallel()
		e := startHookEnv(t, func(c *dispatcher.Config) {
			c.Backoff = outbox.Backoff{Initial: time.Hour, Max: time.Hour, NoJitter: true}
		}, slowly(errBoom))
		o := e.outcomes.wait(t, e.id, 1)[0]
		require.Equal(t, outbox.StatusPending, o.Status)
		require.Equal(t, outbox.CodeHandlerError, o.Code)
		require.ErrorIs(t, o.Err, errBoom)
		require.False(t, o.Snoozed)
		require.True(t, o.NextAttemptAt.Equal(nextAttemptAt(t, e.db, e.id)), "the stored due time")
		require.InDelta(t, time.Hour.Seconds(), o.NextAttemptAt.Sub(dbNow(t, e.db)).Seconds(), 5)
		require.Equal(t, 1, o.Event.Attempt)
		requireTimings(t, o)
	})

	t.Run("sent", func(t *testing.T) {
		t.Parallel()
		e := startHookEnv(t, nil, slowly(nil))
		o := e.outcomes.wait(t, e.id, 1)[0]
		require.Equal(t, outbox.StatusSent, o.Status)
		require.Empty(t, o.Code)
		require.NoError(t, o.Err)
		require.False(t, o.Snoozed)
		require.True(t, o.NextAttemptAt.IsZero())
		require.Equal(t, e.id, o.Event.ID)
		require.Equal(t, "x", o.Event.Type)
		require.Equal(t, 1, o.Event.Attempt)
		requireTimings(t, o)
	})

	t.Run("snoozed", func(t *testing.T) {
		t.Parallel()
		e := startHookEnv(t, nil, slowly(outbox.Snooze(time.Hour)))
		o := e.outcomes.wait(t, e.id, 1)[0]
		require.Equal(t, outbox.StatusPending, o.Status)
		require.True(t, o.Snoozed)
		require.Empty(t, o.Code)
		d, ok := outbox.SnoozeDelay(o.Err)
		require.True(t, ok)
		require.Equal(t, time.Hour, d)
		require.True(t, o.NextAttemptAt.Equal(nextAttemptAt(t, e.db, e.id)), "the stored due time")
		require.Equal(t, 1, o.Event.Attempt)
		require.Zero(t, o.Event.Snoozes, "the snoozes before this attempt")
		requireTimings(t, o)
	})

	t.Run("worker lost", func(t *testing.T) {
		t.Parallel()
		e := startHookEnv(t, func(c *dispatcher.Config) {
			c.RecoverEvery = 1
			c.MaxRecoveries = 1
		}, nil, `status = 'PROCESSING', lock_token = gen_random_uuid(), lock_owner = 'dead', locked_at = now(),
			started_at = now(), lease_until = now() - interval '1 second', recoveries = 1`)
		o := e.outcomes.wait(t, e.id, 1)[0]
		require.Equal(t, outbox.StatusFailed, o.Status)
		require.Equal(t, outbox.CodeWorkerLost, o.Code)
		require.Error(t, o.Err)
		require.Equal(t, e.id, o.Event.ID)
		require.Equal(t, 1, o.Event.Attempt)
		require.Zero(t, o.QueueWait)
		require.Zero(t, o.RunDuration)
	})
}

// Every event that becomes FAILED is logged at WARN with its id, type and
// code, never its payload.
func TestFailedEventsAreLogged(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "x", 3)
	_, err := db.Pool.Exec(context.Background(), `UPDATE outbox_events SET payload = 'payload-secret'::bytea`)
	require.NoError(t, err)
	logs := &logRecorder{}
	cfg := baseConfig(db)
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		return outbox.Permanent(errors.New("refused by the handler"))
	}))
	runDispatcher(t, d)
	// The lines come just after the outcomes are written.
	waitFor(t, "three events FAILED and logged", func() bool {
		return statusCounts(t, db)[outbox.StatusFailed] == 3 && logs.count(slog.LevelWarn, "code", string(outbox.CodeHandlerError)) >= 3
	})

	for _, id := range ids {
		require.Equal(t, 1, logs.count(slog.LevelWarn, "event_id", id.String()), "each FAILED event is logged once")
	}
	require.Equal(t, 3, logs.count(slog.LevelWarn, "code", string(outbox.CodeHandlerError)))
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, rec := range logs.records {
		rec.Attrs(func(a slog.Attr) bool {
			require.NotContains(t, a.Value.String(), "payload-secret", "no payload in the log")
			return true
		})
	}
}

// A handler's panic is logged at ERROR with the stack of the panic, which
// nothing else records, and its retry at INFO; the event is retried and
// delivered.
func TestHandlerPanicIsLogged(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	logs := &logRecorder{}
	cfg := baseConfig(db)
	cfg.Logger = slog.New(logs)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	var calls atomic.Int32
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		if calls.Add(1) == 1 {
			panicInHandler()
		}
		return nil
	}))
	runDispatcher(t, d)
	waitFor(t, "the event SENT", func() bool { return readRow(t, db, id).Status == outbox.StatusSent })

	require.Equal(t, 1, logs.count(slog.LevelError, "event_id", id.String()))
	require.Equal(t, 1, logs.count(slog.LevelInfo, "event_id", id.String()), "the retry is logged at INFO")
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var stack string
	for _, rec := range logs.records {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "stack" {
				stack = a.Value.String()
			}
			return true
		})
	}
	require.Contains(t, stack, "panicInHandler", "the stack shows where the handler panicked")
}

//go:noinline
func panicInHandler() { panic("handler bug") }
