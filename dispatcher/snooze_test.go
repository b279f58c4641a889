package dispatcher_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A snooze returns the event to PENDING at the database's now() + d,
// whatever the process clock says, with its attempts unchanged and one
// more snooze; the next attempt has the same number and sees the count.
func TestSnoozeKeepsAttempts(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	outcomes := &outcomeLog{}
	cfg := baseConfig(db)
	dispatcher.SetClock(&cfg, func() time.Time { return time.Now().Add(-3 * time.Hour) }) // a badly skewed process clock
	cfg.OnOutcome = outcomes.add
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	seen := make(chan outbox.Event, 2)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		seen <- e
		if e.Snoozes == 0 {
			return outbox.Snooze(10 * time.Second)
		}
		return nil
	}))
	runDispatcher(t, d)

	first := <-seen
	require.Equal(t, 1, first.Attempt)
	require.Zero(t, first.Snoozes)
	o := outcomes.wait(t, id, 1)[0]
	require.True(t, o.Snoozed)
	require.Equal(t, row{Status: outbox.StatusPending, Snoozes: 1}, readRow(t, db, id), "no attempt spent")
	var due float64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM next_attempt_at - now()) FROM outbox_events WHERE id = $1`, id).Scan(&due))
	require.InDelta(t, 10, due, 2, "next_attempt_at = database now() + 10s")
	require.Equal(t, uint64(1), d.Stats().Snoozed)
	require.Zero(t, d.Stats().Retried)

	_, err = db.Pool.Exec(context.Background(), `UPDATE outbox_events SET next_attempt_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	d.Trigger()
	second := <-seen
	require.Equal(t, 1, second.Attempt, "the snooze spent no attempt")
	require.Equal(t, 1, second.Snoozes)
	require.Equal(t, outbox.StatusSent, outcomes.wait(t, id, 2)[1].Status)
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Snoozes: 1}, readRow(t, db, id))
}

// Past MaxSnoozes, a snooze makes the event FAILED with snooze_limit.
func TestSnoozeLimit(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	outcomes := &outcomeLog{}
	cfg := baseConfig(db)
	cfg.MaxSnoozes = 3
	cfg.OnOutcome = outcomes.add
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	var calls atomic.Int32
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		calls.Add(1)
		return outbox.Snooze(0)
	}))
	runDispatcher(t, d)

	got := outcomes.wait(t, id, 4)
	for _, o := range got[:3] {
		require.True(t, o.Snoozed)
	}
	last := got[3]
	require.Equal(t, outbox.StatusFailed, last.Status)
	require.Equal(t, outbox.CodeSnoozeLimit, last.Code)
	require.False(t, last.Snoozed)
	require.Contains(t, last.Err.Error(), "snoozed 3 times")
	require.Equal(t, row{Status: outbox.StatusFailed, Attempts: 1, Snoozes: 3, Code: "snooze_limit"}, readRow(t, db, id))
	require.Equal(t, int32(4), calls.Load())
}

// A snooze out of range, a snooze under Permanent and a publisher's
// snooze are ordinary failures.
func TestSnoozeThatIsNot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		publish bool // a publisher returns err, no handler
		want    row
	}{
		{"negative delay", outbox.Snooze(-time.Second), false, row{Status: outbox.StatusFailed, Attempts: 1, Code: "handler_error"}},
		{"delay over a year", outbox.Snooze(outbox.MaxSnoozeDelay + time.Hour), false, row{Status: outbox.StatusFailed, Attempts: 1, Code: "handler_error"}},
		{"permanent wins", outbox.Permanent(outbox.Snooze(time.Second)), false, row{Status: outbox.StatusFailed, Attempts: 1, Code: "handler_error"}},
		{"publisher", outbox.Snooze(time.Second), true, row{Status: outbox.StatusFailed, Attempts: 1, Code: "publish_error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t)
			id := insertEvents(t, db, "x", 1)[0]
			outcomes := &outcomeLog{}
			cfg := baseConfig(db)
			cfg.MaxAttempts = 1
			cfg.OnOutcome = outcomes.add
			if tt.publish {
				cfg.Publisher = snoozingPublisher{}
			}
			d, err := dispatcher.New(db.NewPool(t, 4), cfg)
			require.NoError(t, err)
			if !tt.publish {
				require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return tt.err }))
			}
			runDispatcher(t, d)
			o := outcomes.wait(t, id, 1)[0]
			require.False(t, o.Snoozed)
			require.Equal(t, tt.want, readRow(t, db, id))
		})
	}
}

func TestMaxSnoozesRange(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t).NewPool(t, 1)
	for _, n := range []int{-1, 1_000_001} {
		_, err := dispatcher.New(pool, dispatcher.Config{MaxSnoozes: n})
		var cerr *outbox.ConfigError
		require.ErrorAs(t, err, &cerr, n)
		require.Equal(t, "MaxSnoozes", cerr.Field)
	}
	_, err := dispatcher.New(pool, dispatcher.Config{MaxSnoozes: 1})
	require.NoError(t, err)
	require.False(t, errors.Is(err, outbox.ErrInvalidConfig))
}

// snoozingPublisher answers every message with a snooze, which the
// dispatcher must not honour from a publisher.
type snoozingPublisher struct{}

func (snoozingPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = outbox.Snooze(time.Second)
	}
	return errs
}
