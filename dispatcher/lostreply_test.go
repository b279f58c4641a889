package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// lostReply runs a dispatcher whose completion of its one event commits
// while the reply is held back: the handler tells the proxy in front of
// the dispatcher's pool to hold the server's replies right before it
// returns, and the completion is the next statement sent.
type lostReply struct {
	db    *testdb.DB
	d     *dispatcher.Dispatcher
	proxy *replyProxy
	errs  *errorLog
	sent  atomic.Int32  // SENT outcomes of the event
	held  chan struct{} // closed when the handler has held the replies
	id    uuid.UUID

	mu       sync.Mutex
	outcomes []dispatcher.Outcome // every outcome of the event reported to OnOutcome
}

// reported returns the outcomes of the event reported so far.
func (lr *lostReply) reported() []dispatcher.Outcome {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return append([]dispatcher.Outcome(nil), lr.outcomes...)
}

// startLostReply starts it with a lease of 1s: each statement of the
// dispatcher times out after half of it (500ms), and the heartbeat beats
// every 333ms. The handler succeeds. configure adjusts the configuration.
func startLostReply(t *testing.T, configure func(*dispatcher.Config)) *lostReply {
	t.Helper()
	return startLostReplyOf(t, nil, configure)
}

// startLostReplyOf is startLostReply with a handler that returns result.
func startLostReplyOf(t *testing.T, result error, configure func(*dispatcher.Config)) *lostReply {
	t.Helper()
	db := testdb.NewMigrated(t)
	lr := &lostReply{db: db, errs: &errorLog{}, held: make(chan struct{}), id: insertEvents(t, db, "x", 1)[0]}
	p, proxy := newProxiedPool(t, db)
	lr.proxy = proxy
	cfg := baseConfig(db)
	cfg.LeaseDuration = time.Second
	cfg.Wakeup = dispatcher.WakeupDisabled // the listener's connection would go through the proxy too
	cfg.OnError = lr.errs.add
	cfg.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
		if o.Event.ID != lr.id {
			return
		}
		if o.Status == outbox.StatusSent {
			lr.sent.Add(1)
		}
		lr.mu.Lock()
		lr.outcomes = append(lr.outcomes, o)
		lr.mu.Unlock()
	}
	if configure != nil {
		configure(&cfg)
	}
	var err error
	lr.d, err = dispatcher.New(p, cfg)
	require.NoError(t, err)
	var once sync.Once
	require.NoError(t, lr.d.Handle("x", func(context.Context, outbox.Event) error {
		once.Do(func() {
			proxy.hold()
			close(lr.held)
		})
		return result
	}))
	runDispatcher(t, lr.d)
	<-lr.held
	return lr
}

// failedWrites counts the failed writes of outcomes reported to OnError.
func (lr *lostReply) failedWrites() int {
	return len(lr.errs.filter(func(err error) bool {
		return strings.HasPrefix(err.Error(), "pgoutbox: complete:")
	}))
}

// A completion whose write committed but whose reply was lost is retried,
// and the retry recognises the outcome its own claim wrote: OnOutcome reports SENT
// once, and no lock loss is reported. With DeleteSent, where the row is
// gone and nothing shows whose write removed it, the outcome is reported
// unknown (outbox.ErrOutcomeUnknown), never as a lock loss.
//
// The replies stay held for the first four writes (each times out after
// 500ms; 100, 200 and 400ms pass between them), so that the wait before
// the fifth is 800ms: more than two heartbeats, which find the SENT row no
// longer held under the claim and must leave the waiting outcome to the
// completer. The local clock is frozen, so that no local deadline passes
// while the renewals fail too: the database's lease alone fences the
// writes here.
func TestLostCompletionReplyIsRecognised(t *testing.T) {
	t.Parallel()
	const heldWrites = 4
	for _, deleteSent := range []bool{false, true} {
		name := "sent"
		if deleteSent {
			name = "deleted"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lr := startLostReply(t, func(cfg *dispatcher.Config) {
				cfg.DeleteSent = deleteSent
				dispatcher.SetClock(cfg, frozenClock())
			})
			waitFor(t, "the held writes to fail", func() bool { return lr.failedWrites() >= heldWrites })
			lr.proxy.release()
			waitFor(t, "the event settled", func() bool { return lr.d.Stats().InFlight == 0 })
			// The outcome is counted and reported just after the event is
			// let go.
			waitFor(t, "the outcome reported", func() bool {
				return lr.sent.Load() > 0 || len(lr.errs.matching(outbox.ErrOutcomeUnknown)) > 0
			})

			require.Empty(t, lr.errs.matching(outbox.ErrLockLost), "the completion's own earlier write is no lock loss")
			st := lr.d.Stats()
			require.Zero(t, st.LockLost)
			if !deleteSent {
				require.Equal(t, int32(1), lr.sent.Load(), "OnOutcome reports SENT once")
				require.Equal(t, uint64(1), st.Sent)
				require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, lr.db, lr.id))
				return
			}
			require.Zero(t, lr.sent.Load())
			require.Zero(t, st.Sent)
			require.Equal(t, uint64(1), st.OutcomeUnknown)
			unknown := lr.errs.matching(outbox.ErrOutcomeUnknown)
			require.Len(t, unknown, 1)
			require.ErrorContains(t, unknown[0], lr.id.String())
			require.Empty(t, statusCounts(t, lr.db), "the first write deleted the row")
		})
	}
}

// When the retries of a completion whose reply was lost cannot reach the
// database before the event's local deadline passes, the dispatcher gives
// the event up without knowing whether the first write took effect (it
// did): it reports the outcome unknown, not a lock loss.
//
// The replies stay held until then. On the real clock the local deadline,
// at most 800ms after the last renewal that got through (before the
// hold), has passed when the second write fails (at least 1.1s after the
// hold).
func TestLostCompletionReplyPastDeadlineIsUnknown(t *testing.T) {
	t.Parallel()
	lr := startLostReply(t, nil)
	waitFor(t, "the event given up", func() bool { return lr.d.Stats().InFlight == 0 })
	lr.proxy.release()

	require.Empty(t, lr.errs.matching(outbox.ErrLockLost))
	unknown := lr.errs.matching(outbox.ErrOutcomeUnknown)
	require.Len(t, unknown, 1)
	require.ErrorContains(t, unknown[0], lr.id.String())
	st := lr.d.Stats()
	require.Zero(t, st.LockLost)
	require.Equal(t, uint64(1), st.OutcomeUnknown)
	require.Zero(t, lr.sent.Load())
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, lr.db, lr.id), "the first write took effect")
}

// A completion whose SENT write committed but whose reply was lost, and
// whose row is gone when the retry reads it back (deleted, as retention
// or an operator's purge deletes SENT rows), was delivered, but nothing
// left in the table says whose write recorded that: the outcome is
// unknown, never a lock loss ("will run again"), with KeepSent too (an
// operator's purge, or another replica's DeleteSent, deletes rows all the
// same; until version 9 the KeepSent case reported a lock loss).
func TestLostCompletionReplyRowDeletedByRetention(t *testing.T) {
	t.Parallel()
	const heldWrites = 4
	for _, keepSent := range []bool{false, true} {
		name := "retained"
		if keepSent {
			name = "kept"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lr := startLostReply(t, func(cfg *dispatcher.Config) {
				cfg.KeepSent = keepSent
				if !keepSent {
					cfg.RetainSent = time.Hour
				}
				cfg.RetentionInterval = 24 * time.Hour // the test deletes the row itself
				dispatcher.SetClock(cfg, frozenClock())
			})
			waitFor(t, "the held writes to fail", func() bool { return lr.failedWrites() >= heldWrites })
			_, err := lr.db.Pool.Exec(context.Background(), `WITH t AS (DELETE FROM outbox_events WHERE id = $1 AND status = 'SENT')
				DELETE FROM outbox_events_sent WHERE id = $1`, lr.id)
			require.NoError(t, err)
			require.Empty(t, statusCounts(t, lr.db), "the first write made the row SENT")
			lr.proxy.release()
			waitFor(t, "the outcome reported", func() bool {
				return len(lr.errs.matching(outbox.ErrOutcomeUnknown))+len(lr.errs.matching(outbox.ErrLockLost)) > 0
			})
			require.Zero(t, lr.sent.Load())
			require.Empty(t, lr.errs.matching(outbox.ErrLockLost), "a delivered event reported as one that will run again")
			unknown := lr.errs.matching(outbox.ErrOutcomeUnknown)
			require.Len(t, unknown, 1)
			require.ErrorContains(t, unknown[0], lr.id.String())
			require.Equal(t, uint64(1), lr.d.Stats().OutcomeUnknown)
		})
	}
}

// A completion whose write committed but whose reply was lost, after which
// another replica claims the event (its retry or snooze became due before
// the completer's retry) and, in some cases, records an outcome of its own
// before the retried write reads the row back. The first dispatcher still
// recognises the outcome it wrote and reports it as if the reply had
// arrived: through the row's outcome token, which claims leave alone, or,
// once another replica's outcome replaced it, through the token in its
// attempt-log entry. A snooze writes no attempt-log entry: once another
// outcome replaced its token, the snooze is reported unknown. Never a lock
// loss.
//
// The first dispatcher claims only at its start (a poll interval of an
// hour, no wake-ups), so the other replica, started once the first write
// committed and failed on the client, claims the event when its retry or
// snooze becomes due (2s after the write). The FAILED case is replayed by
// an operator first (which clears lock_token), then claimed and sent by
// the other replica.
func TestLostCompletionReplyThenAnotherReplica(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		result    error         // what the first dispatcher's handler returns
		first     row           // the row once its write committed
		completes bool          // the other replica records an outcome too
		want      outbox.Status // reported to the first OnOutcome; "" for ErrOutcomeUnknown
	}{
		{"RetryClaimed", errors.New("try again"), row{Status: outbox.StatusPending, Attempts: 1, Code: "handler_error"}, false, outbox.StatusPending},
		{"RetryCompleted", errors.New("try again"), row{Status: outbox.StatusPending, Attempts: 1, Code: "handler_error"}, true, outbox.StatusPending},
		{"SnoozeClaimed", outbox.Snooze(2 * time.Second), row{Status: outbox.StatusPending, Snoozes: 1}, false, outbox.StatusPending},
		{"SnoozeCompleted", outbox.Snooze(2 * time.Second), row{Status: outbox.StatusPending, Snoozes: 1}, true, ""},
		{"FailedReplayedCompleted", outbox.Permanent(errors.New("no")), row{Status: outbox.StatusFailed, Attempts: 1, Code: "handler_error"}, true, outbox.StatusFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			start := time.Now()
			lr := startLostReplyOf(t, tt.result, func(cfg *dispatcher.Config) {
				cfg.PollInterval = time.Hour
				cfg.Backoff = outbox.Backoff{Initial: 2 * time.Second, Max: 2 * time.Second, NoJitter: true}
				dispatcher.SetClock(cfg, frozenClock())
			})
			waitFor(t, "the first write to commit", func() bool { return readRow(t, lr.db, lr.id) == tt.first })
			waitFor(t, "the first write to fail", func() bool { return lr.failedWrites() >= 1 })

			if tt.first.Status == outbox.StatusFailed {
				ops, err := admin.New(lr.db.Pool, admin.Config{Table: lr.db.Table()})
				require.NoError(t, err)
				res, err := ops.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{lr.id}})
				require.NoError(t, err)
				require.Len(t, res.Replayed, 1)
			}
			other := startOtherReplica(t, lr.db, tt.completes)
			<-other.claimed
			if tt.completes {
				waitFor(t, "the other replica's outcome", func() bool {
					return readRow(t, lr.db, lr.id).Status == outbox.StatusSent
				})
			}
			lr.proxy.release()
			waitFor(t, "the first outcome reported", func() bool {
				return len(lr.reported())+len(lr.errs.matching(outbox.ErrOutcomeUnknown))+len(lr.errs.matching(outbox.ErrLockLost)) > 0
			})

			require.Empty(t, lr.errs.matching(outbox.ErrLockLost), "an outcome the dispatcher wrote is no lock loss")
			st := lr.d.Stats()
			require.Zero(t, st.LockLost)
			if tt.want == "" {
				require.Empty(t, lr.reported())
				unknown := lr.errs.matching(outbox.ErrOutcomeUnknown)
				require.Len(t, unknown, 1)
				require.ErrorContains(t, unknown[0], lr.id.String())
				require.Equal(t, uint64(1), st.OutcomeUnknown)
				return
			}
			require.Empty(t, lr.errs.matching(outbox.ErrOutcomeUnknown))
			got := lr.reported()
			require.Len(t, got, 1)
			o := got[0]
			require.Equal(t, tt.want, o.Status)
			require.Equal(t, 1, o.Event.Attempt)
			switch {
			case tt.want == outbox.StatusFailed:
				require.Equal(t, uint64(1), st.Failed)
				require.Equal(t, outbox.CodeHandlerError, o.Code)
			case tt.first.Snoozes == 1:
				require.True(t, o.Snoozed)
				require.Equal(t, uint64(1), st.Snoozed)
			default:
				require.Equal(t, outbox.CodeHandlerError, o.Code)
				require.Equal(t, uint64(1), st.Retried)
			}
			if tt.want == outbox.StatusPending {
				// Due 2s after the write (database clock), and claimed
				// by the other replica since.
				require.False(t, o.NextAttemptAt.Before(start.Add(2*time.Second)), o.NextAttemptAt)
				require.False(t, o.NextAttemptAt.After(time.Now()), o.NextAttemptAt)
			}
		})
	}
}

// otherReplica is a second dispatcher on the same table, without the
// proxy, whose handler of type x signals claimed and then succeeds, or
// blocks until the test ends.
type otherReplica struct {
	claimed chan struct{}
}

func startOtherReplica(t *testing.T, db *testdb.DB, completes bool) *otherReplica {
	t.Helper()
	o := &otherReplica{claimed: make(chan struct{})}
	cfg := baseConfig(db)
	cfg.Wakeup = dispatcher.WakeupDisabled
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	unblock := make(chan struct{})
	var once sync.Once
	require.NoError(t, d.Handle("x", func(ctx context.Context, _ outbox.Event) error {
		once.Do(func() { close(o.claimed) })
		if !completes {
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		return nil
	}))
	runDispatcher(t, d)
	t.Cleanup(func() { close(unblock) }) // before the Stop that runDispatcher registered
	return o
}

// A completion whose first write may have taken effect (it timed out) but
// did not, because the row was locked until the lease had expired and
// recovery had taken the row back: the retried write changes nothing, and
// the row read back proves that the lease was lost first (the recovery's
// attempt-log entry names the claim: the attempt had started). That stays
// a lock loss, not an unknown outcome.
//
// The test locks the row while the handler runs, so that the completion
// waits for it and times out (500ms); then, in the same transaction,
// expires the lease and recovers the row, and commits. The local clock is
// frozen, so that the dispatcher's local deadline does not end the
// outcome first.
func TestLostCompletionAfterRecoveryIsLockLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	id := insertEvents(t, db, "x", 1)[0]
	errs := &errorLog{}
	cfg := baseConfig(db)
	cfg.LeaseDuration = time.Second
	cfg.Wakeup = dispatcher.WakeupDisabled
	cfg.OnError = errs.add
	dispatcher.SetClock(&cfg, frozenClock())
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	running, locked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		once.Do(func() {
			close(running)
			<-locked
		})
		return errors.New("try again") // a retry: only the recovery's log entry tells it from one replaced since
	}))
	runDispatcher(t, d)

	<-running
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	close(locked)
	waitFor(t, "the first write to time out", func() bool {
		return len(errs.filter(func(err error) bool { return strings.HasPrefix(err.Error(), "pgoutbox: complete:") })) > 0
	})
	_, err = tx.Exec(ctx, `UPDATE outbox_events SET lease_until = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
	store, err := lease.New(db.Table())
	require.NoError(t, err)
	rec, err := store.Recover(ctx, tx, lease.RecoverParams{Limit: 1, MaxRecoveries: 5})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id}, rec.Pending)
	require.NoError(t, tx.Commit(ctx))

	waitFor(t, "the outcome reported", func() bool {
		return len(errs.matching(outbox.ErrLockLost))+len(errs.matching(outbox.ErrOutcomeUnknown)) > 0
	})
	require.Len(t, errs.matching(outbox.ErrLockLost), 1)
	require.Empty(t, errs.matching(outbox.ErrOutcomeUnknown))
	require.Equal(t, uint64(1), d.Stats().LockLost)
}
