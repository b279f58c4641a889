package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// outagePublisher reports every message unavailable while down is set;
// otherwise it fails the messages fail says how, once each, and
// acknowledges the rest.
type outagePublisher struct {
	down atomic.Bool
	// keyOrdered: while down, only the first message of each key is
	// tried (unavailable), the rest reported outbox.ErrNotAttempted, as
	// a key-ordered publisher does.
	keyOrdered bool
	calls      atomic.Int64
	mu         sync.Mutex
	fail       map[uuid.UUID]error // failed once, then forgotten
	sent       map[uuid.UUID]int   // acknowledged messages per event
}

func newOutagePublisher() *outagePublisher {
	return &outagePublisher{fail: map[uuid.UUID]error{}, sent: map[uuid.UUID]int{}}
}

func (p *outagePublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.calls.Add(1)
	errs := make([]error, len(msgs))
	tried := map[string]bool{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range msgs {
		switch err, ok := p.fail[m.Event.ID]; {
		case p.down.Load() && p.keyOrdered && tried[m.Event.PartitionKey]:
			errs[i] = outbox.ErrNotAttempted
		case p.down.Load():
			tried[m.Event.PartitionKey] = true
			errs[i] = outbox.Unavailable(errors.New("dial tcp 127.0.0.1:9092: connect: connection refused"))
		case ok:
			errs[i] = err
			delete(p.fail, m.Event.ID)
		default:
			p.sent[m.Event.ID]++
		}
	}
	return errs
}

// keyOrderedPublisher is an outagePublisher that promises per-key order
// (outbox.KeyOrderedPublisher), so that an ordered dispatcher sends a
// key's run in one call.
type keyOrderedPublisher struct{ *outagePublisher }

func (keyOrderedPublisher) PublishesKeysInOrder() bool { return true }

// circuitLog records the circuit's states, in order.
type circuitLog struct {
	mu     sync.Mutex
	states []dispatcher.CircuitState
}

func (l *circuitLog) add(s dispatcher.CircuitState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states = append(l.states, s)
}

func (l *circuitLog) all() []dispatcher.CircuitState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]dispatcher.CircuitState(nil), l.states...)
}

// count is how many times the circuit entered s.
func (l *circuitLog) count(s dispatcher.CircuitState) int {
	n := 0
	for _, x := range l.all() {
		if x == s {
			n++
		}
	}
	return n
}

// requireTransitions checks that every step of states is one the circuit
// may take: closed → open, open → probing or closed, probing → open or
// closed.
func requireTransitions(t *testing.T, states []dispatcher.CircuitState) {
	t.Helper()
	allowed := map[[2]dispatcher.CircuitState]bool{
		{dispatcher.CircuitClosed, dispatcher.CircuitOpen}:    true,
		{dispatcher.CircuitOpen, dispatcher.CircuitProbing}:   true,
		{dispatcher.CircuitOpen, dispatcher.CircuitClosed}:    true,
		{dispatcher.CircuitProbing, dispatcher.CircuitOpen}:   true,
		{dispatcher.CircuitProbing, dispatcher.CircuitClosed}: true,
	}
	prev := dispatcher.CircuitClosed
	for i, s := range states {
		require.True(t, allowed[[2]dispatcher.CircuitState{prev, s}], "step %d: %s → %s in %v", i, prev, s, states)
		prev = s
	}
}

// attemptsSpent is the sum of attempts and attempt-log entries over the
// outbox's events, wherever they are.
func attemptsSpent(t *testing.T, db *testdb.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(attempts + jsonb_array_length(attempt_log)), 0) FROM `+testdb.AllRows(db.Table())+` AS e`).Scan(&n))
	return n
}

// downConfig returns a publisher that is down, a log of the circuit's
// states and a configuration for both (see circuitConfig).
func downConfig(db *testdb.DB) (*outagePublisher, *circuitLog, dispatcher.Config) {
	pub := newOutagePublisher()
	pub.down.Store(true)
	log := &circuitLog{}
	return pub, log, circuitConfig(db, pub, log)
}

// circuitConfig is baseConfig with pub, batches of 10 and a circuit that
// probes within 10-40ms, its states recorded in log.
func circuitConfig(db *testdb.DB, pub outbox.Publisher, log *circuitLog) dispatcher.Config {
	cfg := baseConfig(db)
	cfg.Publisher = pub
	cfg.BatchSize = 10
	cfg.CircuitMinBackoff = 10 * time.Millisecond
	cfg.CircuitMaxBackoff = 40 * time.Millisecond
	dispatcher.SetCircuitHook(&cfg, log.add)
	return cfg
}

// TestCircuitOutageSpendsNoAttempts runs a publisher that reports every
// message unavailable, then recovers: while it is down the circuit opens,
// probes fail and open it again, and no event spends an attempt (none
// counted, none in the attempt log, no retry); once it is up a probe
// closes the circuit and every event becomes SENT at its first attempt.
func TestCircuitOutageSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "t", 50)
	pub, log, cfg := downConfig(db)
	mp := &telemetrytest.MeterProvider{}
	cfg.MeterProvider = mp
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)

	waitFor(t, "three failed probes", func() bool { return log.count(dispatcher.CircuitProbing) >= 3 })
	require.Equal(t, 0, attemptsSpent(t, db), "no attempt spent during the outage")
	s := d.Stats()
	require.Zero(t, s.Retried)
	require.Zero(t, s.Failed)
	require.Equal(t, uint64(1), s.CircuitOpens, "failed probes reopen without counting an opening")
	require.NotZero(t, s.OutageReturned)
	require.NotEqual(t, dispatcher.CircuitClosed, s.Circuit)
	h := d.Health()
	require.NotEqual(t, dispatcher.CircuitClosed, h.Circuit)
	require.False(t, h.CircuitOpenSince.IsZero())
	require.NoError(t, h.Healthy(time.Minute), "an open circuit is healthy")
	require.NoError(t, mp.Collect(context.Background()))
	require.NotEmpty(t, mp.Points("pgoutbox.circuit.state"))
	require.NotZero(t, mp.Points("pgoutbox.circuit.state")[0].Value, "open or probing")

	pub.down.Store(false)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	for _, id := range ids {
		r := readRow(t, db, id)
		require.Equal(t, 1, r.Attempts, "sent at its first attempt")
		require.Empty(t, r.Code)
	}
	states := log.all()
	requireTransitions(t, states)
	require.Equal(t, dispatcher.CircuitClosed, states[len(states)-1])
	s = d.Stats()
	require.Zero(t, s.Retried)
	require.Equal(t, dispatcher.CircuitClosed, s.Circuit)
	require.GreaterOrEqual(t, s.Released, s.OutageReturned, "outage returns go through the release path")
	require.True(t, d.Health().CircuitOpenSince.IsZero())
	require.InDelta(t, 1, mp.Sum("pgoutbox.circuit.opens"), 0)
	require.InDelta(t, float64(s.OutageReturned), mp.Sum("pgoutbox.events.outage_returned"), 0, "the metric and Stats agree")
	require.NoError(t, mp.Collect(context.Background()))
	points := mp.Points("pgoutbox.circuit.state")
	require.Zero(t, points[len(points)-1].Value, "closed")
}

// TestCircuitPerEventFailuresSpendAttempts publishes one call in which one
// message fails with an ordinary error, one reports unavailable and one
// succeeds: the destination answered, so both failures spend an attempt
// and the circuit stays closed. A permanent error wrapped as unavailable
// stays permanent.
func TestCircuitPerEventFailuresSpendAttempts(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insertEvents(t, db, "t", 4)
	pub := newOutagePublisher()
	pub.fail[ids[0]] = errors.New("message rejected")
	pub.fail[ids[1]] = outbox.Unavailable(errors.New("partition leader unreachable"))
	pub.fail[ids[3]] = outbox.Unavailable(outbox.Permanent(errors.New("message too large")))
	var log circuitLog
	d, err := dispatcher.New(db.Pool, circuitConfig(db, pub, &log))
	require.NoError(t, err)
	runDispatcher(t, d)

	waitFor(t, "the events settled", func() bool {
		c := statusCounts(t, db)
		return c[outbox.StatusSent] == 3 && c[outbox.StatusFailed] == 1
	})
	require.Equal(t, 2, readRow(t, db, ids[0]).Attempts, "one failed attempt, then SENT")
	require.Equal(t, 2, readRow(t, db, ids[1]).Attempts, "one failed attempt, then SENT")
	require.Equal(t, 1, readRow(t, db, ids[2]).Attempts)
	require.Equal(t, outbox.StatusFailed, readRow(t, db, ids[3]).Status)
	require.Empty(t, log.all(), "the circuit never opened")
	require.Equal(t, uint64(2), d.Stats().Retried)
	require.Zero(t, d.Stats().OutageReturned)
}

// TestCircuitKeepsHandlerOnlyTypes runs a dispatcher that publishes one
// type and handles another while its publisher is down: with the circuit
// open, the handled type is still claimed and delivered, and the
// published type spends no attempt.
func TestCircuitKeepsHandlerOnlyTypes(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	pubIDs := insertEvents(t, db, "pub", 5)
	pub, log, cfg := downConfig(db)
	cfg.PublishTypes = []string{"pub"}
	cfg.CircuitMinBackoff, cfg.CircuitMaxBackoff = time.Hour, time.Hour // no probe: the circuit stays open
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	var handled atomic.Int64
	require.NoError(t, d.Handle("local", func(context.Context, outbox.Event) error {
		handled.Add(1)
		return nil
	}))
	runDispatcher(t, d)

	waitFor(t, "the circuit open", func() bool { return log.count(dispatcher.CircuitOpen) == 1 })
	waitFor(t, "the published events back to PENDING", func() bool {
		return statusCounts(t, db)[outbox.StatusPending] == len(pubIDs) && d.Stats().InFlight == 0
	})
	localIDs := insertEvents(t, db, "local", 5)
	d.Trigger()
	waitFor(t, "the handled events SENT", func() bool {
		return statusCounts(t, db)[outbox.StatusSent] == len(localIDs)
	})
	require.Equal(t, int64(len(localIDs)), handled.Load())
	require.Equal(t, []dispatcher.CircuitState{dispatcher.CircuitOpen}, log.all(), "still open, never probed")
	require.Equal(t, int64(1), pub.calls.Load(), "nothing published since the circuit opened")
	// A claim planned before the circuit opened may still land after it
	// and take published events; they are held back and returned, so
	// wait for that rather than read a moment in between.
	waitFor(t, "the published events PENDING again", func() bool {
		return statusCounts(t, db)[outbox.StatusPending] == len(pubIDs) && d.Stats().InFlight == 0
	})
	require.Equal(t, int64(1), pub.calls.Load(), "nothing published since the circuit opened")
	for _, id := range pubIDs {
		r := readRow(t, db, id)
		require.Equal(t, outbox.StatusPending, r.Status)
		require.Zero(t, r.Attempts)
	}
}

// TestCircuitAtMostOnce: at most once, the events of the call that found
// the destination unavailable become FAILED (the publisher cannot prove
// they did not reach it), but the circuit opens, so that the rest of the
// backlog is not claimed and spends nothing.
func TestCircuitAtMostOnce(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "t", 20)
	pub, log, cfg := downConfig(db)
	cfg.Delivery = dispatcher.AtMostOnce
	cfg.BatchSize, cfg.Claimers, cfg.Concurrency = 5, 1, 1 // one claim of 5 at a time, no claim ahead
	cfg.CircuitMinBackoff, cfg.CircuitMaxBackoff = time.Hour, time.Hour
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)

	waitFor(t, "the first call's events FAILED", func() bool {
		return statusCounts(t, db)[outbox.StatusFailed] == 5 && d.Stats().InFlight == 0
	})
	c := statusCounts(t, db)
	require.Equal(t, 15, c[outbox.StatusPending], "the rest is not claimed while the circuit is open")
	require.Equal(t, []dispatcher.CircuitState{dispatcher.CircuitOpen}, log.all())
	require.Zero(t, d.Stats().OutageReturned)
	require.Equal(t, int64(1), pub.calls.Load(), "no publish since the circuit opened")
}

// TestCircuitCatchAllStopsClaiming: a dispatcher that claims every type
// (a Publisher without PublishTypes) claims nothing while its circuit is
// open, though it keeps polling.
func TestCircuitCatchAllStopsClaiming(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "t", 5)
	pub, log, cfg := downConfig(db)
	cfg.CircuitMinBackoff, cfg.CircuitMaxBackoff = time.Hour, time.Hour // no probe
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)

	waitFor(t, "the events back to PENDING behind an open circuit", func() bool {
		return log.count(dispatcher.CircuitOpen) == 1 && statusCounts(t, db)[outbox.StatusPending] == 5 && d.Stats().InFlight == 0
	})
	polls := func(n uint64) {
		from := d.Stats().PollCycles
		waitFor(t, "poll cycles", func() bool { return d.Stats().PollCycles >= from+n })
	}
	polls(3) // a claim planned before the circuit opened has ended by now
	claims := d.Stats().ClaimCycles
	polls(5)
	require.Equal(t, claims, d.Stats().ClaimCycles, "no claim while the circuit is open")
	require.Equal(t, int64(1), pub.calls.Load())
}

// TestCircuitConfigDefaults: CircuitMaxBackoff defaults to a minute, or
// to CircuitMinBackoff when that is longer (config_test.go checks the
// ranges).
func TestCircuitConfigDefaults(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.CircuitMinBackoff = 2 * time.Minute
	_, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
}

// TestCircuitEmptyProbeWaitsForPoll: once nothing is left to publish
// (another replica took the events), a probe that claims nothing does not
// ask for another at once: probes come at the pace of polls, not in a
// loop of wake-ups.
func TestCircuitEmptyProbeWaitsForPoll(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insertEvents(t, db, "pub", 1)
	_, log, cfg := downConfig(db)
	cfg.PollInterval = 200 * time.Millisecond // ten wake-up cooldowns (20ms)
	cfg.PublishTypes = []string{"pub"}
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)

	waitFor(t, "the circuit open", func() bool { return log.count(dispatcher.CircuitOpen) == 1 })
	waitFor(t, "the event back to PENDING", func() bool {
		return statusCounts(t, db)[outbox.StatusPending] == 1 && d.Stats().InFlight == 0
	})
	_, err = db.Pool.Exec(context.Background(), `DELETE FROM outbox_events`) // a probe may hold it: then its release finds no row
	require.NoError(t, err)
	settled := d.Stats().PollCycles
	waitFor(t, "two poll cycles", func() bool { return d.Stats().PollCycles >= settled+2 })
	start := d.Stats()
	waitFor(t, "five poll cycles", func() bool { return d.Stats().PollCycles >= start.PollCycles+5 })
	end := d.Stats()
	polls, claims := end.PollCycles-start.PollCycles, end.ClaimCycles-start.ClaimCycles
	require.LessOrEqual(t, claims, 2*polls+2, "%d claims in %d polls", claims, polls)
}

// TestCircuitOrderedOutage: under per-key ordering, with a publisher that
// tries only the first message of each key and reports the rest not
// attempted, an outage still opens the circuit and spends no attempt;
// once the publisher is back every event is SENT at its first attempt.
func TestCircuitOrderedOutage(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	ids := insertKeyed(t, db, "t", []string{"a", "a", "a", "b", "b", "b"})
	pub, log, cfg := downConfig(db)
	pub.keyOrdered = true
	cfg.Publisher = keyOrderedPublisher{pub}
	cfg.Ordering = dispatcher.PerKey
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	runDispatcher(t, d)

	waitFor(t, "two failed probes", func() bool { return log.count(dispatcher.CircuitProbing) >= 2 })
	require.Equal(t, 0, attemptsSpent(t, db), "no attempt spent during the outage")
	require.NotZero(t, d.Stats().OrderReleased, "the publisher reported later messages of a key not attempted")
	pub.down.Store(false)
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == len(ids) })
	for _, id := range ids {
		require.Equal(t, 1, readRow(t, db, id).Attempts)
	}
	require.Zero(t, d.Stats().Retried)
}
