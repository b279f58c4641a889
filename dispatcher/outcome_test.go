package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestOutcomes(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		configure func(*dispatcher.Config)
		handler   outbox.Handler // nil: no handler registered
		want      row
		wantCalls int
	}{
		{
			name:      "at-most-once failure is final",
			configure: func(c *dispatcher.Config) { c.Delivery = dispatcher.AtMostOnce },
			handler:   func(context.Context, outbox.Event) error { return errBoom },
			want:      row{Status: outbox.StatusFailed, Attempts: 1, Code: "handler_error"},
			wantCalls: 1,
		},
		{
			name:      "budget spent",
			configure: func(c *dispatcher.Config) { c.MaxAttempts = 3 },
			handler:   func(context.Context, outbox.Event) error { return errBoom },
			want:      row{Status: outbox.StatusFailed, Attempts: 3, Code: "handler_error"},
			wantCalls: 3,
		},
		{
			name: "fails twice then succeeds",
			handler: func(_ context.Context, e outbox.Event) error {
				if e.Attempt < 3 {
					return errBoom
				}
				return nil
			},
			want:      row{Status: outbox.StatusSent, Attempts: 3, Code: "handler_error"},
			wantCalls: 3,
		},
		{
			name:      "panic is recovered and retried",
			configure: func(c *dispatcher.Config) { c.MaxAttempts = 2 },
			handler:   func(context.Context, outbox.Event) error { panic("kaboom") },
			want:      row{Status: outbox.StatusFailed, Attempts: 2, Code: "panic"},
			wantCalls: 2,
		},
		{
			name:      "permanent fails after one attempt",
			handler:   func(context.Context, outbox.Event) error { return outbox.Permanent(errBoom) },
			want:      row{Status: outbox.StatusFailed, Attempts: 1, Code: "handler_error"},
			wantCalls: 1,
		},
		{
			name: "timeout",
			configure: func(c *dispatcher.Config) {
				c.MaxAttempts = 1
				c.HandlerTimeout = 50 * time.Millisecond
			},
			handler: func(ctx context.Context, _ outbox.Event) error {
				<-ctx.Done()
				return ctx.Err()
			},
			want:      row{Status: outbox.StatusFailed, Attempts: 1, Code: "timeout"},
			wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t)
			id := insertEvents(t, db, "x", 1)[0]
			cfg := baseConfig(db)
			if tt.configure != nil {
				tt.configure(&cfg)
			}
			var calls atomic.Int32
			var failed []outbox.Code
			var mu sync.Mutex
			cfg.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
				if o.Status != outbox.StatusFailed {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, o.Code)
			}
			d, err := dispatcher.New(db.NewPool(t, 4), cfg)
			require.NoError(t, err)
			if tt.handler != nil {
				require.NoError(t, d.Handle("x", func(ctx context.Context, e outbox.Event) error {
					calls.Add(1)
					return tt.handler(ctx, e)
				}))
			}
			runDispatcher(t, d)
			waitFor(t, "a final status", func() bool {
				s := readRow(t, db, id).Status
				return s == outbox.StatusSent || s == outbox.StatusFailed
			})
			if tt.want.Status == outbox.StatusFailed { // the hook fires just after the row commits
				waitFor(t, "the FAILED outcome", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(failed) > 0
				})
			}
			require.Equal(t, tt.want, readRow(t, db, id))
			require.Equal(t, int32(tt.wantCalls), calls.Load())
			mu.Lock()
			defer mu.Unlock()
			if tt.want.Status == outbox.StatusFailed {
				require.Equal(t, []outbox.Code{outbox.Code(tt.want.Code)}, failed)
			} else {
				require.Empty(t, failed)
			}
		})
	}
}

// The retry time is the database's now() plus the backoff, whatever the
// process clock says.
func TestRetryTimeUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	cfg := baseConfig(db)
	cfg.Backoff = outbox.Backoff{Initial: 10 * time.Second, NoJitter: true}
	dispatcher.SetClock(&cfg, func() time.Time { return time.Now().Add(-3 * time.Hour) }) // a badly skewed process clock
	type retry struct {
		code outbox.Code
		next time.Time
	}
	retried := make(chan retry, 1)
	cfg.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
		if o.Status == outbox.StatusPending {
			retried <- retry{o.Code, o.NextAttemptAt}
		}
	}
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return errors.New("later") }))
	runDispatcher(t, d)
	r := <-retried
	require.Equal(t, outbox.CodeHandlerError, r.code)

	var delay float64
	var stored time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM next_attempt_at - now()), next_attempt_at FROM outbox_events WHERE id = $1`, id).
		Scan(&delay, &stored))
	require.InDelta(t, 10, delay, 2, "next_attempt_at = database now() + 10s")
	require.True(t, r.next.Equal(stored), "the outcome reports the stored time")
	require.Equal(t, row{Status: outbox.StatusPending, Attempts: 1, Code: "handler_error"}, readRow(t, db, id))
}

// With at-most-once delivery a lost lease makes the event FAILED instead of
// running its handler again.
func TestAtMostOnceNeverRunsTwice(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	log := newCallLog()
	started, recovered := make(chan struct{}, 1), make(chan struct{})
	letReturn := sync.OnceFunc(func() { close(recovered) })
	cfg := baseConfig(db)
	cfg.Delivery = dispatcher.AtMostOnce
	cfg.RecoverEvery = 1
	cfg.LeaseDuration = 30 * time.Second
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(ctx context.Context, e outbox.Event) error {
		log.enter(e.ID)
		defer log.exit(e.ID)
		started <- struct{}{}
		<-recovered // outlives the lease we expire below, and its recovery
		return nil
	}))
	runDispatcher(t, d)
	t.Cleanup(letReturn) // runs before runDispatcher's Stop (last in, first out), should the test fail
	<-started
	_, err = db.Pool.Exec(context.Background(), `UPDATE outbox_events SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)
	waitFor(t, "FAILED", func() bool { return readRow(t, db, id).Status == outbox.StatusFailed })
	letReturn()
	// Give a wrong second run the chance to happen: recovery runs in every
	// poll cycle, and a claim follows it.
	cycles := d.Stats().ClaimCycles
	waitFor(t, "three more claims", func() bool { return d.Stats().ClaimCycles >= cycles+3 })
	require.Equal(t, 1, log.count(id))
	require.Equal(t, row{Status: outbox.StatusFailed, Attempts: 0, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, id))
}
