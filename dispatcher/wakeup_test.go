package dispatcher_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// emitOne commits one event through the emitter (with its notification).
func emitOne(t *testing.T, db *testdb.DB, eventType string) uuid.UUID {
	t.Helper()
	e, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	var ids []uuid.UUID
	err = pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		ids, err = e.Emit(context.Background(), tx, outbox.Event{Type: eventType, Payload: []byte("{}")})
		return err
	})
	require.NoError(t, err)
	return ids[0]
}

// wakeupConfig polls so rarely that only a wake-up can deliver within a
// test, and gives the listener a name and a switch that cuts it off.
func wakeupConfig(t *testing.T, db *testdb.DB) (dispatcher.Config, *atomic.Bool, string) {
	t.Helper()
	cfg := baseConfig(db)
	cfg.PollInterval = 30 * time.Second
	cfg.Wakeup = dispatcher.WakeupRequired
	lc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	app := "listener_" + uuid.NewString()[:8]
	lc.RuntimeParams["application_name"] = app
	down := &atomic.Bool{}
	dialer := &net.Dialer{}
	lc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, errors.New("listener cut off by the test")
		}
		return dialer.DialContext(ctx, network, addr)
	}
	cfg.ListenerConnConfig = lc
	return cfg, down, app
}

// handledAt records, per event, the dispatcher's poll count and the time
// when its handler ran.
type handledAt struct {
	mu    sync.Mutex
	polls map[uuid.UUID]uint64
	times map[uuid.UUID]time.Time
	ch    chan uuid.UUID
}

func newHandledAt() *handledAt {
	return &handledAt{polls: map[uuid.UUID]uint64{}, times: map[uuid.UUID]time.Time{}, ch: make(chan uuid.UUID, 100)}
}

func (h *handledAt) handler(d **dispatcher.Dispatcher) outbox.Handler {
	return func(_ context.Context, e outbox.Event) error {
		h.mu.Lock()
		h.polls[e.ID] = (*d).Stats().PollCycles
		h.times[e.ID] = time.Now()
		h.mu.Unlock()
		h.ch <- e.ID
		return nil
	}
}

func (h *handledAt) wait(t *testing.T, id uuid.UUID) uint64 {
	t.Helper()
	budget := testctx.New(t) // a hang guard: the poll count says whether a wakeup or a poll delivered it
	for {
		select {
		case got := <-h.ch:
			if got == id {
				h.mu.Lock()
				defer h.mu.Unlock()
				return h.polls[id]
			}
		case <-budget.Done():
			t.Fatalf("event %s was not handled: %v", id, context.Cause(budget))
		}
	}
}

// timeOf returns when the handler of id ran (after wait returned).
func (h *handledAt) timeOf(id uuid.UUID) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.times[id]
}

// startListening runs a dispatcher whose handler records its poll count,
// and waits until its listener is up.
func startListening(t *testing.T, db *testdb.DB, cfg dispatcher.Config) (*dispatcher.Dispatcher, *handledAt) {
	t.Helper()
	h := newHandledAt()
	var d *dispatcher.Dispatcher
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", h.handler(&d)))
	runDispatcher(t, d)
	waitFor(t, "the listener", func() bool { return d.Stats().WakeupsActive })
	return d, h
}

// followUps tells a test when the follow-up claims of a dispatcher's
// wake-ups are over (see dispatcher.SetFollowUpsOverHook).
type followUps struct {
	mu   sync.Mutex
	ends []time.Time // when the waker armed no further follow-up
}

// watchFollowUps sets cfg's hook that records the ends of follow-ups.
func watchFollowUps(cfg *dispatcher.Config) *followUps {
	f := &followUps{}
	dispatcher.SetFollowUpsOverHook(cfg, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.ends = append(f.ends, time.Now())
	})
	return f
}

// count is how many times the follow-ups have ended so far.
func (f *followUps) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ends)
}

// waitOver waits until the follow-ups have ended n times in all and the
// claim started by the last end (the last follow-up) has succeeded, so
// that no claim of theirs is still to come. Take n from count before what
// starts the follow-ups waited for, plus one.
func (f *followUps) waitOver(t *testing.T, d *dispatcher.Dispatcher, n int) {
	t.Helper()
	waitFor(t, "the follow-up claims to end", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.ends) >= n && d.Health().LastClaim.After(f.ends[len(f.ends)-1])
	})
}

// last is when the follow-ups last ended (the waker started a claim and
// armed no follow-up after it).
func (f *followUps) last() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ends[len(f.ends)-1]
}

// dueProbes records the next-due probes a dispatcher runs once its claims
// have settled (see dispatcher.SetDueProbeHook): after the last claim of
// an idle dispatcher, the probe is what could still start another (by
// arming the due timer).
type dueProbes struct {
	mu     sync.Mutex
	probes []dueProbe
}

// dueProbe is one next-due probe: when it ran and whether it armed the
// due timer.
type dueProbe struct {
	at    time.Time
	armed bool
}

// watchDueProbes sets cfg's hook that records the next-due probes. A
// probe arms the due timer when it finds an event due within cfg's
// PollInterval (IdlePollInterval left at its default: polls are not
// stretched).
func watchDueProbes(cfg *dispatcher.Config) *dueProbes {
	p := &dueProbes{}
	poll := cfg.PollInterval
	dispatcher.SetDueProbeHook(cfg, func(wait time.Duration, found bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.probes = append(p.probes, dueProbe{at: time.Now(), armed: found && wait < poll})
	})
	return p
}

// next waits for the first probe at or after since, past the first skip
// such probes, and returns it.
func (p *dueProbes) next(t *testing.T, since time.Time, skip int) dueProbe {
	t.Helper()
	var got dueProbe
	waitFor(t, "a next-due probe once the claims settled", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, q := range p.probes {
			if !q.at.Before(since) {
				if n == skip {
					got = q
					return true
				}
				n++
			}
		}
		return false
	})
	return got
}

// untilIdle waits for what could start a claim once the claims from since
// on have settled: the next-due probe they settle on, and while a probe
// armed the due timer, the claim that timer starts and the probe it
// settles on. It calls check after each probe, and returns once a probe
// armed nothing (then nothing is left to start a claim, polls aside).
func (p *dueProbes) untilIdle(t *testing.T, d *dispatcher.Dispatcher, since time.Time, check func()) {
	t.Helper()
	for i := 0; ; i++ {
		q := p.next(t, since, i)
		check()
		if !q.armed {
			return
		}
		waitFor(t, "the claim the due timer starts", func() bool { return d.Health().LastClaim.After(q.at) })
	}
}

func TestWakeupDeliversWithoutWaitingForPoll(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg, _, _ := wakeupConfig(t, db)
	d, h := startListening(t, db, cfg)

	id := emitOne(t, db, "x")
	require.Zero(t, h.wait(t, id), "handled before any poll")
	require.GreaterOrEqual(t, d.Stats().Wakeups, uint64(1))
}

// A killed listener reconnects; events committed while it was gone are
// dispatched on reconnect, and later ones by notification again.
func TestListenerReconnectsAfterTermination(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg, down, app := wakeupConfig(t, db)
	follow := watchFollowUps(&cfg)
	d, h := startListening(t, db, cfg)

	down.Store(true)
	var killed int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed))
	require.Equal(t, 1, killed)
	waitFor(t, "the listener to notice", func() bool { return !d.Stats().WakeupsActive })
	// Wait for the follow-up claims of the last wake-up (the listener's
	// connect, for one WakeupCooldown after it) to end, so that only the
	// reconnect can find the next event.
	follow.waitOver(t, d, 1)
	whileDown := emitOne(t, db, "x")
	waitFor(t, "a failed reconnect", func() bool { return d.Stats().Errors >= 2 })
	require.Equal(t, outbox.StatusPending, readRow(t, db, whileDown).Status, "nothing woke the dispatcher yet")

	down.Store(false)
	require.Zero(t, h.wait(t, whileDown), "dispatched on reconnect, not by a poll")
	waitFor(t, "the listener back", func() bool { return d.Stats().WakeupsActive })
	after := emitOne(t, db, "x")
	require.Zero(t, h.wait(t, after))
	require.Equal(t, uint64(2), d.Stats().ListenerConnects)
}

func TestWakeupModes(t *testing.T) {
	t.Parallel()
	t.Run("AutoFallsBackToPolling", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, down, _ := wakeupConfig(t, db)
		down.Store(true)
		cfg.Wakeup = dispatcher.WakeupAuto
		cfg.PollInterval = 20 * time.Millisecond
		cfg.WakeupProbeTimeout = 200 * time.Millisecond
		var sent atomic.Int32
		cfg.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
			if o.Status == outbox.StatusSent {
				sent.Add(1)
			}
		}
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
		runDispatcher(t, d)
		emitOne(t, db, "x")
		waitFor(t, "delivery by polling", func() bool { return sent.Load() == 1 })
		require.False(t, d.Stats().WakeupsActive)
	})
	t.Run("RequiredFailsWhenListenerCannotConnect", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, down, _ := wakeupConfig(t, db)
		down.Store(true)
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		err = d.Run(context.Background())
		require.ErrorIs(t, err, dispatcher.ErrWakeupUnavailable)
		require.ErrorContains(t, err, "listener connect")
	})
	t.Run("RequiredFailsWhenNotificationsDoNotArrive", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, _, _ := wakeupConfig(t, db)
		// The listener sits in another database: LISTEN works, but the
		// probe's NOTIFY, sent through the pool, never reaches it.
		cfg.ListenerConnConfig.Database = otherDatabase(cfg.ListenerConnConfig.Database)
		cfg.WakeupProbeTimeout = 300 * time.Millisecond
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		err = d.Run(context.Background())
		require.ErrorIs(t, err, dispatcher.ErrWakeupUnavailable)
		require.ErrorContains(t, err, "probe notification did not arrive")
	})
}

func otherDatabase(name string) string {
	if name == "template1" {
		return "postgres"
	}
	return "template1"
}

// A burst of single-event transactions wakes the dispatcher far fewer times
// than there are events: notifications coalesce.
func TestNotificationBurstCoalesces(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg, _, _ := wakeupConfig(t, db)
	var sent atomic.Int64
	cfg.OnOutcome = func(_ context.Context, o dispatcher.Outcome) {
		if o.Status == outbox.StatusSent {
			sent.Add(1)
		}
	}
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
	waitFor(t, "the listener", func() bool { return d.Stats().WakeupsActive })

	const writers, perWriter = 8, 1250
	// Every transaction notifies: this is about the dispatcher coalescing
	// notifications, not the emitter sending fewer.
	e, err := emitter.New(emitter.Config{Table: db.Table(), NotifyEveryEmit: true})
	require.NoError(t, err)
	pool := db.NewPool(t, writers)
	// A burst: commits without waiting for the disk, so they arrive far
	// faster than one claim cycle per commit could follow.
	began := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range perWriter {
				err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(context.Background(), "SET LOCAL synchronous_commit = off"); err != nil {
						return err
					}
					_, err := e.Emit(context.Background(), tx, outbox.Event{Type: "x", Payload: []byte("{}")})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every event SENT", func() bool { return sent.Load() == writers*perWriter })
	took := time.Since(began)
	st := d.Stats()
	t.Logf("10,000 transactions in %v: %d notifications, %d claim cycles, %d polls", took, st.Wakeups, st.ClaimCycles, st.PollCycles)
	// While busy (half a batch or more per cooldown: 2,500 events/s at
	// the defaults), wake-ups start at most one cycle per cooldown (20ms),
	// however many notifications arrive, and each may be followed by one
	// claim for the events that sent no notify: at 2,500 commits/s or
	// more, about 25 events a cycle on average (the bound allows 10),
	// whatever the load (a slower dispatcher claims more a cycle). Counted in events
	// per cycle, not against the wall clock: a bound from the elapsed
	// time failed under load (421 cycles in 3.9s, each claiming 24 events
	// on average, where one cycle per cooldown allowed 247). A cycle per
	// notification would claim one event each. A machine too loaded to
	// commit that fast keeps the dispatcher quiet, where each wake-up may
	// claim; even then never a cycle per event.
	if took < 4*time.Second {
		require.LessOrEqual(t, st.ClaimCycles, uint64(writers*perWriter/10), "claim cycles beyond one per cooldown")
	}
	require.Less(t, st.ClaimCycles, uint64(writers*perWriter/2), "claim cycles must be far fewer than events")
	require.LessOrEqual(t, st.PollCycles, uint64(took/cfg.PollInterval)+1, "polls beyond one per PollInterval")
}

// stretchedDispatcher runs a dispatcher with wake-ups whose handler fails
// each event's first attempt and reports every attempt's poll count, and
// waits until its idle polls have stretched to 3s or more.
func stretchedDispatcher(t *testing.T, db *testdb.DB, backoff time.Duration) (*dispatcher.Dispatcher, chan uint64) {
	t.Helper()
	cfg, _, _ := wakeupConfig(t, db)
	cfg.PollInterval = time.Second
	cfg.IdlePollInterval = time.Hour
	cfg.Backoff = outbox.Backoff{Initial: backoff, NoJitter: true}
	attempts := make(chan uint64, 4)
	var d *dispatcher.Dispatcher
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(_ context.Context, e outbox.Event) error {
		attempts <- d.Stats().PollCycles
		if e.Attempt == 1 {
			return errors.New("once")
		}
		return nil
	}))
	runDispatcher(t, d)
	waitFor(t, "the poll interval to stretch", func() bool { return d.Stats().PollInterval >= 3*time.Second })
	return d, attempts
}

// While polls are stretched far apart, a retry still runs when it becomes
// due, woken by the due timer rather than a poll.
func TestRetryRunsOnTimeWhilePollStretched(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	d, attempts := stretchedDispatcher(t, db, 300*time.Millisecond)
	emitOne(t, db, "x")
	first, second := <-attempts, <-attempts
	require.Equal(t, first, second, "the retry ran before the next poll")
	require.GreaterOrEqual(t, d.Stats().DueWakeups, uint64(1))
	require.Equal(t, time.Second, d.Stats().PollInterval, "claims that found events end the stretch")
}

// An emitter sends no notify for an event emitted within its
// NotifyInterval of one that did; the dispatcher's follow-up claims, every
// fifth of WakeupCooldown for one WakeupCooldown after the wake-up, still
// deliver it without a poll.
func TestFollowUpClaimFindsEventsWithoutNotify(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	const window = 500 * time.Millisecond // wide, so that a loaded machine commits within it
	cfg, _, _ := wakeupConfig(t, db)
	cfg.WakeupCooldown = window
	follow := watchFollowUps(&cfg)
	probes := watchDueProbes(&cfg)
	d, h := startListening(t, db, cfg)
	follow.waitOver(t, d, 1) // the start-up wake-up and its follow-up claims are over
	wakeups, claims, ends := d.Stats().Wakeups, d.Stats().ClaimCycles, follow.count()

	e, err := emitter.New(emitter.Config{Table: db.Table(), NotifyInterval: 10 * time.Second})
	require.NoError(t, err)
	emit := func() uuid.UUID {
		var ids []uuid.UUID
		require.NoError(t, pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
			ids, err = e.Emit(context.Background(), tx, outbox.Event{Type: "x", Payload: []byte("{}")})
			return err
		}))
		return ids[0]
	}
	start := time.Now()
	require.Zero(t, h.wait(t, emit()), "the first, notified, before any poll")
	second := emit() // after the claim the notification caused, with no notify of its own
	if time.Since(start) > window/2 {
		t.Skip("the machine was too slow to commit the second event within the cooldown")
	}
	require.Zero(t, h.wait(t, second), "the second, found by a follow-up claim, before any poll")
	require.Equal(t, wakeups+1, d.Stats().Wakeups, "one notification for both")
	follow.waitOver(t, d, ends+1)
	after := d.Stats().ClaimCycles
	// The wake-up's claim and its follow-ups, a fifth of the cooldown
	// apart, until one began a cooldown after it: five, or fewer when
	// a loaded machine runs them late.
	require.LessOrEqual(t, after, claims+6, "at most five follow-ups")
	// What could claim a cooldown after the last follow-up: the waker
	// armed no timer (its follow-ups are over), so only the due timer
	// armed once the claims settled.
	probes.untilIdle(t, d, follow.last(), func() {
		require.Equal(t, after, d.Stats().ClaimCycles, "no claim a cooldown after the last follow-up")
	})
}

// With polls stretched, an event emitted with a delay runs when the delay
// has passed, and a retry with a backoff shorter than a claim round trip
// runs at once: neither waits for the next poll.
func TestDueEventsRunWhilePollStretched(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	d, attempts := stretchedDispatcher(t, db, time.Millisecond)
	e, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		_, err := e.Emit(context.Background(), tx, outbox.Event{Type: "x", Payload: []byte("{}"), Delay: 300 * time.Millisecond})
		return err
	}))
	polls := d.Stats().PollCycles
	first, second := <-attempts, <-attempts
	require.Equal(t, polls, first, "the delayed event ran before the next poll")
	require.Equal(t, polls, second, "the 1ms retry ran before the next poll")
}

// skipScene is what a scenario of TestSkippedNotifyWaitsAtMostPollInterval
// works with.
type skipScene struct {
	e     *emitter.Emitter
	pool  *pgxpool.Pool
	h     *handledAt
	quiet func() // leaves the table idle, then waits for a poll
}

// A throttled notify costs at most PollInterval. An Emit sends no notify
// when an earlier Emit of its Emitter took the NotifyInterval's one; here
// that notify never arrives (its transaction or savepoint rolled back),
// has not yet (its transaction is still open), or arrived long before. On
// a table that looked idle, with the dispatcher's defaults apart from a
// short PollInterval (IdlePollInterval keeps its default relation to it),
// the event that sent no notify is still handed out within PollInterval of
// its commit: the interval has not stretched, and the event is claimed
// by the first poll that starts after its commit (or the one after, when
// a poll had started when it committed). Counted in polls, not in wall time, so that load cannot
// fail it.
func TestSkippedNotifyWaitsAtMostPollInterval(t *testing.T) {
	t.Parallel()
	const poll = 200 * time.Millisecond

	// run runs a dispatcher, leaves its table idle, and has emit commit an
	// event whose Emit sent no notify, right after a poll (so that a
	// stretched poll would be far off); emit returns the event, its commit
	// time and how many notifications it sent on purpose. run checks how
	// long after its commit the event was handed out.
	run := func(t *testing.T, emit func(s skipScene) (uuid.UUID, time.Time, uint64)) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, _, _ := wakeupConfig(t, db)
		cfg.PollInterval = poll
		// The poll count when the event was claimed, not when its
		// handler ran: a handler started late under load must not
		// count as a late claim.
		var started atomic.Pointer[dispatcher.Dispatcher]
		var claimedMu sync.Mutex
		claimedAt := map[uuid.UUID]uint64{}
		dispatcher.SetClaimHook(&cfg, func(events []outbox.Event) {
			if dd := started.Load(); dd != nil {
				polls := dd.Stats().PollCycles
				claimedMu.Lock()
				defer claimedMu.Unlock()
				for _, e := range events {
					claimedAt[e.ID] = polls
				}
			}
		})
		d, h := startListening(t, db, cfg)
		started.Store(d)
		quiet := func() {
			// Five idle polls: enough for polls to stretch, if they do
			// (doubling from the first idle one, 3s in all), then one more.
			polls := d.Stats().PollCycles
			waitFor(t, "idle polls", func() bool { return d.Stats().PollCycles >= polls+5 })
		}
		quiet()
		wakeups := d.Stats().Wakeups
		// A NotifyInterval wide enough that the event's Emit skips its
		// notify however slow the machine.
		e, err := emitter.New(emitter.Config{Table: db.Table(), NotifyInterval: 10 * time.Second})
		require.NoError(t, err)
		id, committed, notified := emit(skipScene{e: e, pool: db.Pool, h: h, quiet: quiet})
		atCommit := d.Stats()
		h.wait(t, id)
		claimedMu.Lock()
		claimed, ok := claimedAt[id]
		claimedMu.Unlock()
		require.True(t, ok, "the claim hook saw the event")
		t.Logf("handed out %v after its commit, claimed at poll %d of %d at the commit (poll interval %v)",
			h.timeOf(id).Sub(committed), claimed, atCommit.PollCycles, atCommit.PollInterval)
		require.Equal(t, wakeups+notified, d.Stats().Wakeups, "no notification announced the event")
		require.Equal(t, poll, atCommit.PollInterval, "the poll interval stretched while the table was idle")
		require.LessOrEqual(t, claimed, atCommit.PollCycles+2, "claimed by the first poll after its commit")
	}
	begin := func(t *testing.T, s skipScene) pgx.Tx {
		t.Helper()
		tx, err := s.pool.Begin(context.Background())
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	emitIn := func(t *testing.T, s skipScene, tx pgx.Tx) uuid.UUID {
		t.Helper()
		ids, err := s.e.Emit(context.Background(), tx, outbox.Event{Type: "x", Payload: []byte("{}")})
		require.NoError(t, err)
		return ids[0]
	}
	commit := func(t *testing.T, tx pgx.Tx) time.Time {
		t.Helper()
		require.NoError(t, tx.Commit(context.Background()))
		return time.Now()
	}
	// pair emits one event in a transaction it leaves open (taking the
	// notify) and then one, id, in another (which sends none).
	pair := func(t *testing.T, s skipScene) (notifying pgx.Tx, first uuid.UUID, tx pgx.Tx, id uuid.UUID) {
		t.Helper()
		notifying = begin(t, s)
		first = emitIn(t, s, notifying)
		tx = begin(t, s)
		return notifying, first, tx, emitIn(t, s, tx)
	}

	t.Run("NotifyingTxRolledBack", func(t *testing.T) {
		run(t, func(s skipScene) (uuid.UUID, time.Time, uint64) {
			notifying, _, tx, id := pair(t, s)
			require.NoError(t, notifying.Rollback(context.Background()))
			return id, commit(t, tx), 0
		})
	})
	t.Run("NotifyingSavepointRolledBack", func(t *testing.T) {
		run(t, func(s skipScene) (uuid.UUID, time.Time, uint64) {
			tx := begin(t, s)
			sp, err := tx.Begin(context.Background())
			require.NoError(t, err)
			emitIn(t, s, sp)
			require.NoError(t, sp.Rollback(context.Background()))
			id := emitIn(t, s, tx) // the sibling, after the savepoint
			return id, commit(t, tx), 0
		})
	})
	t.Run("NotifyingTxStillOpen", func(t *testing.T) {
		run(t, func(s skipScene) (uuid.UUID, time.Time, uint64) {
			_, _, tx, id := pair(t, s) // the notifying one is rolled back when the test ends
			return id, commit(t, tx), 0
		})
	})
	// The notify arrived, but long before the event committed: polls had
	// time to stretch again after the claim it caused.
	t.Run("NotifyingTxCommittedLongBefore", func(t *testing.T) {
		run(t, func(s skipScene) (uuid.UUID, time.Time, uint64) {
			notifying, first, tx, id := pair(t, s)
			require.NoError(t, notifying.Commit(context.Background()))
			s.h.wait(t, first)
			s.quiet()
			return id, commit(t, tx), 1
		})
	})
}

// In WakeupAuto mode dispatching does not wait for the wake-up probe:
// with a listener whose notifications never arrive (it sits in another
// database, as behind a transaction-mode pooler the probe's notification
// misses the listener's server connection) and a probe that would wait a
// minute, Start returns and an event is dispatched while the probe is
// still waiting. Stop ends the probe.
func TestAutoWakeupDoesNotDelayDispatching(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg, _, _ := wakeupConfig(t, db)
	cfg.Wakeup = dispatcher.WakeupAuto
	cfg.PollInterval = 20 * time.Millisecond
	cfg.WakeupProbeTimeout = time.Minute
	cfg.ListenerConnConfig.Database = otherDatabase(cfg.ListenerConnConfig.Database)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	listenerAtHandling := make(chan dispatcher.ListenerState, 1)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error {
		listenerAtHandling <- d.Health().Listener
		return nil
	}))
	require.NoError(t, d.Start(context.Background()))
	insertEvents(t, db, "x", 1)

	require.Equal(t, dispatcher.ListenerProbing, <-listenerAtHandling, "dispatched while the probe waited")
	require.False(t, d.Stats().WakeupsActive)
	require.NoError(t, d.Stop(testctx.New(t)), "Stop ends the probe")
	require.Equal(t, dispatcher.ListenerOff, d.Health().Listener)
}

// Health follows the listener: probing, then active once the probe
// succeeds in WakeupAuto mode, unavailable when it fails (polling only).
func TestHealthListenerStates(t *testing.T) {
	t.Parallel()
	t.Run("Active", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, _, _ := wakeupConfig(t, db)
		cfg.Wakeup = dispatcher.WakeupAuto
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		runDispatcher(t, d)
		waitFor(t, "the listener", func() bool { return d.Health().Listener == dispatcher.ListenerActive })
	})
	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, _, _ := wakeupConfig(t, db)
		// In another database the probe's NOTIFY never arrives.
		cfg.ListenerConnConfig.Database = otherDatabase(cfg.ListenerConnConfig.Database)
		cfg.WakeupProbeTimeout = 300 * time.Millisecond
		cfg.Wakeup = dispatcher.WakeupAuto
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		runDispatcher(t, d)
		waitFor(t, "the probe to fail", func() bool { return d.Health().Listener == dispatcher.ListenerUnavailable })
		require.NoError(t, d.Health().Healthy(time.Minute), "polling only is healthy")
	})
	t.Run("RefusedListenerIsUnavailable", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, _, _ := wakeupConfig(t, db)
		cfg.ListenerConnConfig.User = "no_such_role_" + uuid.NewString()[:8]
		cfg.Wakeup = dispatcher.WakeupAuto
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		runDispatcher(t, d)
		waitFor(t, "the verdict", func() bool { return d.Health().Listener == dispatcher.ListenerUnavailable })
	})
	t.Run("ConnectErrorIsRetried", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, down, _ := wakeupConfig(t, db)
		down.Store(true)
		cfg.Wakeup = dispatcher.WakeupAuto
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		runDispatcher(t, d)
		waitFor(t, "a reconnect", func() bool { return d.Health().Listener == dispatcher.ListenerReconnecting })
		down.Store(false)
		waitFor(t, "the listener once reachable", func() bool { return d.Health().Listener == dispatcher.ListenerActive })
	})
	t.Run("RequiredFailsStart", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		cfg, down, _ := wakeupConfig(t, db)
		down.Store(true)
		d, err := dispatcher.New(db.Pool, cfg)
		require.NoError(t, err)
		require.ErrorIs(t, d.Start(context.Background()), dispatcher.ErrWakeupUnavailable)
		require.Equal(t, dispatcher.StateNew, d.Health().State)
	})
}
