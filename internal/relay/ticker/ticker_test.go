package ticker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/relay/ticker"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// run is a Ticker running until stop, with its ticks and calls counted.
type run struct {
	t      *ticker.Ticker
	ticks  atomic.Int64
	calls  atomic.Int64
	made   chan int64 // every tick id recorded, buffered
	called chan bool  // every call's made, buffered
	failed chan error // every failed call's error, buffered
	stop   context.CancelFunc
	done   chan struct{}
	errs   chan error
}

func start(t *testing.T, s *store.Store, owner string, lease time.Duration, idle time.Duration) *run {
	t.Helper()
	r := &run{made: make(chan int64, 10000), called: make(chan bool, 100000), failed: make(chan error, 100000), done: make(chan struct{}), errs: make(chan error, 100)}
	r.t = ticker.New(ticker.Config{Store: s, Owner: owner, Interval: time.Millisecond, Idle: idle, Lease: lease,
		OnTick: func(id int64) { r.ticks.Add(1); r.made <- id },
		OnCall: func(made bool, err error) {
			if err != nil {
				select {
				case r.failed <- err:
				default:
				}
				return
			}
			r.calls.Add(1)
			select {
			case r.called <- made:
			default:
			}
		},
		OnError: func(err error) {
			select {
			case r.errs <- err:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { defer close(r.done); _ = r.t.Run(ctx) }()
	t.Cleanup(func() { r.stop(); <-r.done })
	return r
}

func newStore(t *testing.T) (*testdb.DB, *store.Store) {
	t.Helper()
	db, table := relaytest.NewLog(t)
	s, err := store.New(db.Pool, table)
	require.NoError(t, err)
	return db, s
}

// waitCalls waits until r made n more tick calls.
func (r *run) waitCalls(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.called:
		case err := <-r.errs:
			t.Fatalf("ticker error: %v", err)
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
}

func TestOneOfTwoTicks(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	a := start(t, s, "a", time.Minute, time.Hour)
	b := start(t, s, "b", time.Minute, time.Hour)
	holder, other := a, b
	for !a.t.Held() && !b.t.Held() {
		select {
		case <-a.called:
		case <-b.called:
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
	if b.t.Held() {
		holder, other = b, a
	}
	for range 5 {
		relaytest.Emit(t, db.Pool, "k", 1)
		<-holder.made
	}
	holder.waitCalls(t, 50)
	require.Zero(t, other.ticks.Load(), "the follower never ticks")
	require.Zero(t, other.calls.Load(), "the follower never calls the tick function")
	require.False(t, other.t.Held())
}

func TestTakeoverAfterTheHolderStops(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	a := start(t, s, "a", 300*time.Millisecond, time.Hour)
	a.waitCalls(t, 1)
	require.True(t, a.t.Held())
	b := start(t, s, "b", 300*time.Millisecond, time.Hour)
	a.stop()
	<-a.done
	b.waitCalls(t, 1) // b calls only once it holds the lease
	require.True(t, b.t.Held())
	relaytest.Emit(t, db.Pool, "k", 1)
	<-b.made
}

func TestTakeoverAfterTheLeaseExpires(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	a := start(t, s, "a", time.Hour, time.Hour)
	a.waitCalls(t, 1)
	b := start(t, s, "b", 300*time.Millisecond, time.Hour)
	// The holder's lease runs out without it knowing (a pause, a lost
	// connection): its next tick call is refused and b takes over.
	_, err := db.Pool.Exec(t.Context(), `UPDATE `+relaytest.LogName+`_ticker SET lease_until = now() - interval '1 second'`)
	require.NoError(t, err)
	b.waitCalls(t, 1)
	require.True(t, b.t.Held())
	relaytest.Emit(t, db.Pool, "k", 1)
	<-b.made
	for a.t.Held() { // a finds the lease lost at its next call
		b.waitCalls(t, 1)
	}
}

func TestNoTickWithoutEventsBeforeIdle(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	r := start(t, s, "a", time.Minute, time.Hour)
	r.waitCalls(t, 100)
	require.Zero(t, r.ticks.Load(), "100 calls, no events, not idle: no tick")
	relaytest.Emit(t, db.Pool, "k", 1)
	<-r.made
}

func TestIdleTicks(t *testing.T) {
	t.Parallel()
	_, s := newStore(t)
	r := start(t, s, "a", time.Minute, time.Millisecond)
	<-r.made
	<-r.made
}

func TestLongTransactionCommittingAloneIsTicked(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	r := start(t, s, "a", time.Minute, time.Hour)
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	relaytest.Emit(t, tx, "long", 1)
	<-r.made // the sequence moved
	r.waitCalls(t, 20)
	n := r.ticks.Load()
	require.NoError(t, tx.Commit(t.Context()))
	<-r.made
	require.Equal(t, n+1, r.ticks.Load())
}

// TestThreeTickersRecordEachTickOnce races three tickers with short
// leases: each tick is recorded by one of them, once.
func TestThreeTickersRecordEachTickOnce(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	var runs []*run
	for _, o := range []string{"a", "b", "c"} {
		runs = append(runs, start(t, s, o, 200*time.Millisecond, time.Hour))
	}
	reported := map[int64]bool{}
	report := func(id int64) {
		require.False(t, reported[id], "tick %d reported twice", id)
		reported[id] = true
	}
	for range 20 {
		relaytest.Emit(t, db.Pool, "k", 1)
		select {
		case id := <-runs[0].made:
			report(id)
		case id := <-runs[1].made:
			report(id)
		case id := <-runs[2].made:
			report(id)
		case <-t.Context().Done():
		}
	}
	for _, r := range runs {
		r.stop()
		<-r.done
	}
	// The ids reported are distinct, and every one of them is recorded
	// (a tick whose reply a stop cut off is recorded and not reported).
	var ticks, top int64
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*), max(tick_id) FROM `+relaytest.LogName+`_ticks`).Scan(&ticks, &top))
	require.Equal(t, top, ticks, "tick ids without gaps")
	for _, r := range runs {
		close(r.made)
		for id := range r.made {
			report(id)
		}
	}
	for id := range reported {
		require.LessOrEqual(t, id, top)
	}
	require.GreaterOrEqual(t, len(reported), int(ticks)-1-len(runs))
}

// TestRepeatedErrorReportedOncePerLeaseThird: a snapshot that went
// backwards fails every tick call (every Interval); OnError hears of it
// once per third of Lease.
func TestRepeatedErrorReportedOncePerLeaseThird(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	_, err := db.Pool.Exec(t.Context(), `UPDATE `+relaytest.LogName+`_ticks SET snapshot = '4000000000:4000000000:'::pg_snapshot`)
	require.NoError(t, err)
	r := start(t, s, "a", time.Hour, time.Hour)
	for range 50 {
		select {
		case err := <-r.failed:
			require.ErrorIs(t, err, store.ErrSnapshotBackwards)
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
	require.Len(t, r.errs, 1, "50 failed calls, one report within a third of the lease")
	require.ErrorIs(t, <-r.errs, store.ErrSnapshotBackwards)
}

// TestPartsFollowTheXidRate: the parts kept ahead grow with the xid
// rate the ticker observes (a fake monotonic clock makes the rate).
func TestPartsFollowTheXidRate(t *testing.T) {
	t.Parallel()
	db, s := newStore(t)
	var mono atomic.Int64 // nanoseconds; each read moves it 1ms on
	start := time.Now()
	clk := clock.NewAll(func() time.Time { return start.Add(time.Duration(mono.Add(int64(time.Millisecond)))) })
	parts := make(chan uint64, 100)
	tk := ticker.New(ticker.Config{Store: s, Owner: "a", Interval: time.Millisecond, Idle: time.Hour, Lease: time.Hour,
		PartsEvery: 1, Clock: clk, OnParts: func(_ int, headroom uint64) {
			select {
			case parts <- headroom:
			default: // the test reads only some
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tk.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	first := <-parts
	require.Less(t, first, uint64(store.MinParts*sqlname.LogPartXids))
	// Burn transaction ids: a few ms of the fake clock pass per parts
	// call, so the rate is thousands of xids a second, two days of which
	// fill every part up to MaxParts.
	for {
		_, err := db.Pool.Exec(t.Context(), `DO $$ BEGIN FOR i IN 1..200 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`)
		require.NoError(t, err)
		select {
		case h := <-parts:
			if h > uint64(store.MinParts*sqlname.LogPartXids) {
				require.LessOrEqual(t, h, uint64(store.MaxParts*sqlname.LogPartXids))
				return
			}
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
}
