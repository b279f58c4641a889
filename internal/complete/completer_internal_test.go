package complete

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/bits"
	"strings"
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

type completerBundle struct {
	held     *held.Set
	store    *lease.Store
	report   *report.Reporter
	c        *Completer
	health   healthLog
	mu       sync.Mutex
	outcomes []Outcome
	errs     []error
	errAt    []time.Time
}

// healthLog is what the completer tells Health: the successful writes,
// and the failed ones since the last success or since no outcome was
// left failing.
type healthLog struct {
	mu       sync.Mutex
	ok       int
	failures int
}

func (h *healthLog) completed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.ok, h.failures = h.ok+1, 0
		return
	}
	h.failures++
}

func (h *healthLog) settled() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures = 0
}

// counts returns the successful writes and the failing ones since.
func (h *healthLog) counts() (ok, failures int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok, h.failures
}

// setupCompleter returns a completer writing through pool, with a held
// set of its own whose leases last 30 s, recording what it reports (the
// dispatcher's defaults, MaxAttempts 5).
func setupCompleter(t *testing.T, pool *pgxpool.Pool, table outbox.Table) *completerBundle {
	t.Helper()
	return setupCompleterLease(t, pool, table, 30*time.Second)
}

// setupCompleterLease is setupCompleter with leases of the given length
// in the held set (tests of many rounds on a loaded machine need more
// than 30 s).
func setupCompleterLease(t *testing.T, pool *pgxpool.Pool, table outbox.Table, leaseFor time.Duration) *completerBundle {
	t.Helper()
	b := &completerBundle{}
	table = table.WithDefaults()
	store, err := lease.New(table)
	require.NoError(t, err)
	b.store, b.held = store, held.NewSet(clock.Real(), leaseFor)
	b.report = report.New(report.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Table: table.String(), Owner: "t",
		MeterProvider: otel.GetMeterProvider(), TracerProvider: otel.GetTracerProvider(),
		PublishCode: func(error) outbox.Code { return outbox.CodePublishError },
		OnError: func(err error) {
			b.mu.Lock()
			b.errs, b.errAt = append(b.errs, err), append(b.errAt, time.Now())
			b.mu.Unlock()
		},
	})
	b.c = New(Config{
		Ctx: context.Background(), Held: b.held, Store: store, Pool: pool, Report: b.report,
		Clock: clock.Real(), LeaseWrites: &sync.Mutex{}, RetryScheduled: make(chan struct{}, 1),
		CompletedFunc: b.health.completed, SettledFunc: b.health.settled,
		OutcomeFunc: func(_ context.Context, o Outcome) {
			b.mu.Lock()
			b.outcomes = append(b.outcomes, o)
			b.mu.Unlock()
		},
		OpTimeout: 15 * time.Second, MaxAttempts: 5, Backoff: outbox.Backoff{}.WithDefaults(),
		UnroutableMinDelay: time.Second, UnroutableMaxDelay: 5 * time.Minute,
	})
	return b
}

// run runs the completer until the test ends or stop is called; stop
// returns how long run took to return.
func (b *completerBundle) run(t *testing.T) (stop func() time.Duration) {
	t.Helper()
	quit, cancel := context.WithCancel(context.Background())
	returned := make(chan time.Time, 1)
	go func() {
		b.c.Run(quit)
		returned <- time.Now()
	}()
	var once sync.Once
	stop = func() time.Duration {
		var took time.Duration
		once.Do(func() {
			asked := time.Now()
			cancel()
			took = (<-returned).Sub(asked)
		})
		return took
	}
	t.Cleanup(func() { stop() })
	return stop
}

// finishAll holds the batch and finishes its events with results, in
// order.
func (b *completerBundle) finishAll(t *testing.T, batch lease.Batch, results ...held.Result) []*held.Item {
	t.Helper()
	items, _ := b.held.Add(context.Background(), batch, time.Now(), 0)
	for i, it := range items {
		require.True(t, b.held.Begin(it, 0))
		require.False(t, b.held.Finish(it, results[i]))
	}
	return items
}

func TestCompleter(t *testing.T) {
	t.Parallel()

	// One write records a success, a retry and a release, reports the
	// first two and lets all three go.
	t.Run("WritesOutcomes", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewMigrated(t)
		ctx := context.Background()
		_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
			SELECT gen_random_uuid(), 'x', '\x7b7d' FROM generate_series(1, 3)`)
		require.NoError(t, err)
		b := setupCompleter(t, db.Pool, db.Table())
		batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: 3, Lease: time.Minute, Start: 3})
		require.NoError(t, err)
		require.Len(t, batch.Events, 3)
		stop := b.run(t)
		b.finishAll(t, batch, held.Result{}, held.Result{Err: errors.New("boom"), Code: outbox.CodeHandlerError}, held.Result{Release: true})
		testctx.Await(t, "held emptied", func() bool { return b.held.Len() == 0 })
		stop() // items leave held a moment before they are reported
		var statuses []string
		require.NoError(t, pgxRows(ctx, db.Pool, db.Table(), batch, &statuses))
		require.Equal(t, []string{"SENT", "PENDING", "PENDING"}, statuses)
		b.mu.Lock()
		defer b.mu.Unlock()
		require.Len(t, b.outcomes, 2)
		require.Equal(t, outbox.StatusSent, b.outcomes[0].Status)
		require.Equal(t, outbox.StatusPending, b.outcomes[1].Status)
		require.Equal(t, uint64(1), b.report.Counters.Released.Load())
		require.Empty(t, b.errs)
	})

	// A write that cannot reach the database is tried again after waits
	// doubling from firstRetry, and a stop ends the wait for the next try
	// at once.
	t.Run("RetriesWithCancellableBackoff", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b := setupCompleter(t, pool, outbox.Table{})
		stop := b.run(t)
		begun := time.Now()
		b.finishAll(t, lease.Batch{Token: uuid.New(), Events: []outbox.Event{{ID: uuid.New(), Attempt: 1}}, Started: []bool{true}}, held.Result{})
		testctx.Await(t, "three failed writes", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.errs) >= 3
		})
		took := stop()
		b.mu.Lock()
		defer b.mu.Unlock()
		require.Less(t, took, 200*time.Millisecond, "the stop waited for the next try (due 400ms after the third)")
		gaps := []time.Duration{b.errAt[1].Sub(b.errAt[0]), b.errAt[2].Sub(b.errAt[1])}
		// OnError runs a little after the completer set the next try's
		// time, so a gap can fall short of the backoff by that much.
		const slack = 10 * time.Millisecond
		require.GreaterOrEqual(t, gaps[0], firstRetry-slack)
		require.GreaterOrEqual(t, gaps[1], 2*firstRetry-slack)
		require.Less(t, b.errAt[0].Sub(begun), firstRetry, "the first try is at once")
		require.Equal(t, 1, b.held.Len(), "the outcome waits, held, for its next try")
	})
}

// TestCompleterManyRefusalsCostTheOthersNothing refuses the outcome of
// every 8th of 512 events written in one go: more refusals than one
// round's budget of statements can narrow down. Only the refused events
// may be given up (recorded FAILED with outcome_refused); every other
// outcome is recorded.
func TestCompleterManyRefusalsCostTheOthersNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	const n, every = 512, 8
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
		SELECT gen_random_uuid(), 'x', '\x7b7d' FROM generate_series(1, $1::int)`, n)
	require.NoError(t, err)
	b := setupCompleter(t, db.Pool, db.Table())
	batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: n, Lease: time.Minute, Start: n})
	require.NoError(t, err)
	require.Len(t, batch.Events, n)
	bad := map[uuid.UUID]bool{}
	for i, e := range batch.Events {
		if i%every == 0 {
			bad[e.ID] = true
		}
	}
	badIDs := make([]uuid.UUID, 0, len(bad))
	for id := range bad {
		badIDs = append(badIDs, id)
	}
	_, err = db.Pool.Exec(ctx, `CREATE TABLE bad_ids AS SELECT unnest($1::uuid[]) AS id`, badIDs)
	require.NoError(t, err)
	refuseOutcomesWhere(t, db, `EXISTS (SELECT 1 FROM bad_ids WHERE id = NEW.id)`)
	b.finishAll(t, batch, make([]held.Result, n)...) // all finished before the completer runs: one write
	stop := b.run(t)
	// The last items leave held a moment before they are reported: wait
	// for the reports (a stop right after held emptied lost 4 of them
	// under load), then for held, then stop.
	testctx.Await(t, "every outcome reported", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.outcomes) >= n
	})
	testctx.Await(t, "held emptied", func() bool { return b.held.Len() == 0 })
	stop()

	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.outcomes, n, "every outcome is recorded")
	for _, o := range b.outcomes {
		if bad[o.Item.Event.ID] {
			require.Equal(t, outbox.CodeOutcomeRefused, o.Code, "a refused outcome is recorded FAILED outcome_refused")
			require.Equal(t, outbox.StatusFailed, o.Status)
		} else {
			require.Equal(t, outbox.StatusSent, o.Status)
		}
	}
	refusedIDs := 0
	var others []string
	for _, err := range b.errs {
		if !errors.Is(err, outbox.ErrOutcomeRefused) {
			if strings.HasPrefix(err.Error(), "event ") {
				others = append(others, err.Error())
			}
			continue
		}
		refusedIDs++
		named := false
		for id := range bad {
			named = named || strings.Contains(err.Error(), id.String())
		}
		require.True(t, named, "only refused events are given up as refused: %v", err)
	}
	require.Equal(t, len(bad), refusedIDs, "other errors: %q", others)
	sent, err := testdb.CountStatus(ctx, db.Pool, db.Table(), outbox.StatusSent)
	require.NoError(t, err)
	require.Equal(t, n-len(bad), sent)
	var refusedRows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE status = 'FAILED'
		AND last_error_code = 'outcome_refused' AND attempts = 0`).Scan(&refusedRows))
	require.Equal(t, len(bad), refusedRows)
}

// pgxRows reads the statuses of the batch's rows, in claim order,
// wherever they are ("" for a row that is nowhere).
func pgxRows(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, batch lease.Batch, statuses *[]string) error {
	for _, e := range batch.Events {
		s, err := testdb.StatusOf(ctx, pool, table, e.ID)
		if err != nil {
			return err
		}
		*statuses = append(*statuses, s)
	}
	return nil
}

// Outcomes the database refuses, written together (a refused write of
// several counts as a failed write), end the run of failed writes once
// they are given up and nothing waits to be written: Health does not
// stay failing on a table where nothing fails any more.
func TestCompleterRefusalsGivenUpEndTheFailingRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
		SELECT gen_random_uuid(), 'x', '\x7b7d' FROM generate_series(1, 2)`)
	require.NoError(t, err)
	b := setupCompleter(t, db.Pool, db.Table())
	batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: 2, Lease: time.Minute, Start: 2})
	require.NoError(t, err)
	require.Len(t, batch.Events, 2)
	_, err = db.Pool.Exec(ctx, `
CREATE FUNCTION refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'refused by the test';
END $$`)
	require.NoError(t, err)
	db.OnOutcomes(t, "refuse_outcome")
	b.finishAll(t, batch, held.Result{}, held.Result{}) // both finished before the completer runs: one write
	stop := b.run(t)
	testctx.Await(t, "held emptied", func() bool { return b.held.Len() == 0 })
	testctx.Await(t, "the run of failed writes to end once nothing waits to be written",
		func() bool { _, failures := b.health.counts(); return failures == 0 })
	stop()
	ok, failures := b.health.counts()
	require.Zero(t, failures)
	require.Zero(t, ok, "no write succeeded")
}

// A write whose items were all let go meanwhile (their leases lost) runs
// no statement, and Health does not count it as a successful write.
func TestCompleterWriteOfNothingIsNoSuccess(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := setupCompleter(t, pool, outbox.Table{})
	items := b.finishAll(t, lease.Batch{Token: uuid.New(), Events: []outbox.Event{{ID: uuid.New(), Attempt: 1}}, Started: []bool{true}}, held.Result{})
	b.held.Remove(items)
	budget := maxWritesPerRound
	b.c.writeSplitting(items, &budget)
	ok, _ := b.health.counts()
	require.Zero(t, ok)
}

// TestRefusedGroupWritesSpendNoTries: a refused write of several outcomes
// that a round's split budget leaves whole says nothing of any one of
// them, so it spends none of their tries. Under load a round takes more
// outcomes at once and its budget isolates fewer of the refused ones: an
// innocent outcome that shared maxWriteTries such writes was given up as
// lost, never reported, and TestCompleterManyRefusalsCostTheOthersNothing
// waited for it until its timeout.
func TestRefusedGroupWritesSpendNoTries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
		SELECT gen_random_uuid(), 'x', '\x7b7d' FROM generate_series(1, 2)`)
	require.NoError(t, err)
	b := setupCompleterLease(t, db.Pool, db.Table(), time.Hour) // the claims' lease: no round may see it expire
	batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: 2, Lease: time.Minute, Start: 2})
	require.NoError(t, err)
	bad, good := batch.Events[0].ID, batch.Events[1].ID
	refuseOutcomesWhere(t, db, `NEW.id = '`+bad.String()+`'`)
	b.finishAll(t, batch, make([]held.Result, 2)...)
	for i := range maxWriteTries + 1 {
		items, dropped, _ := b.held.TakeOutcomes(0)
		require.Empty(t, dropped)
		require.Len(t, items, 2, "both outcomes are still held after %d refused writes of both", i)
		budget := 1 // no split: the write of both is refused whole
		b.c.writeSplitting(items, &budget)
		for _, it := range items {
			it.Record().RetryAt = time.Time{} // due again at once
		}
	}
	stop := b.run(t)
	testctx.Await(t, "the innocent outcome reported", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, o := range b.outcomes {
			if o.Item.Event.ID == good {
				return true
			}
		}
		return false
	})
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.outcomes {
		if o.Item.Event.ID == good {
			require.Equal(t, outbox.StatusSent, o.Status)
		}
	}
	for _, err := range b.errs {
		require.NotContains(t, err.Error(), good.String(), "the innocent event is not given up")
	}
}

// TestRefusedGroupsAreSettledWhileRefusalsKeepArriving: outcomes that a
// round left in a refused write of several go back behind the outcomes
// that arrived during the round. While refused ones keep arriving, each
// round spent its budget splitting the newcomers, and the old group was
// written whole again every round, spending no tries, its leases renewed:
// innocent events stayed PROCESSING for ever (found by review: 117 of 150
// after 30 rounds). Outcomes left whole twice are now written alone.
func TestRefusedGroupsAreSettledWhileRefusalsKeepArriving(t *testing.T) {
	t.Parallel()
	const perRound, rounds = 200, 12
	b, db, claim := refusedRounds(t, perRound, rounds, 4)
	all := claim()
	var innocent []uuid.UUID
	for _, it := range all {
		if it.Event.Type == "good" {
			innocent = append(innocent, it.Event.ID)
		}
	}
	for range rounds {
		items, dropped, _ := b.held.TakeOutcomes(0)
		require.Empty(t, dropped)
		all = append(all, claim()...) // outcomes that arrive while the round writes
		b.c.writeTaken(items)
		for _, it := range all {
			it.Record().RetryAt = time.Time{} // due again at once
		}
	}
	var held int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e
		WHERE status = 'PROCESSING' AND id = ANY($1)`, innocent).Scan(&held))
	require.Zero(t, held, "the first round's innocent outcomes are all written after %d rounds", rounds)
}

// TestSuspectsCostABoundedRound: with refused outcomes arriving every
// round (1 in 20), the outcomes written alone are capped per round, so a
// round spends at most maxAlonePerRound + maxWritesPerRound statements,
// plus one for each level of a split cut short by the budget (the halves
// still waiting are written whole).
// Review found rounds writing a thousand outcomes alone, one statement
// each, the held set growing meanwhile.
func TestSuspectsCostABoundedRound(t *testing.T) {
	t.Parallel()
	const perRound, rounds = 1000, 6
	b, _, claim := refusedRounds(t, perRound, rounds, 20)
	all := claim()
	for i := range rounds {
		items, _, _ := b.held.TakeOutcomes(0)
		all = append(all, claim()...)
		before := b.c.writes
		b.c.writeTaken(items)
		// maxAlonePerRound is half the budget: a round costs at most twice it.
		require.LessOrEqual(t, b.c.writes-before, 2*maxWritesPerRound+bits.Len(uint(len(items))), "round %d's statements", i)
		for _, it := range all {
			it.Record().RetryAt = time.Time{}
		}
	}
}

// refusedRounds sets up a completer over perRound*(rounds+1) claimable
// events of which one in every is of type "bad", whose outcomes a
// trigger refuses, and returns it with a claim of the next perRound
// events, finished (the outcomes of a round).
func refusedRounds(t *testing.T, perRound, rounds, every int) (*completerBundle, *testdb.DB, func() []*held.Item) {
	t.Helper()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, payload)
		SELECT gen_random_uuid(), CASE WHEN i % $2 = 0 THEN 'bad' ELSE 'good' END, '\x7b7d'
		FROM generate_series(1, $1::int) AS i`, perRound*(rounds+1), every)
	require.NoError(t, err)
	b := setupCompleterLease(t, db.Pool, db.Table(), time.Hour) // the claims' lease: no round may see it expire
	refuseOutcomesWhere(t, db, `NEW.event_type = 'bad'`)
	return b, db, func() []*held.Item {
		batch, err := b.store.Claim(ctx, db.Pool, lease.ClaimParams{Owner: "t", Limit: perRound, Lease: time.Hour, Start: perRound})
		require.NoError(t, err)
		return b.finishAll(t, batch, make([]held.Result, len(batch.Events))...)
	}
}

// refuseOutcomesWhere makes the database refuse every outcome written to
// a row for which cond (an SQL condition on NEW) holds, with a trigger.
func refuseOutcomesWhere(t *testing.T, db *testdb.DB, cond string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
CREATE FUNCTION refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF `+cond+` THEN
		RAISE EXCEPTION 'refused by the test';
	END IF;
	RETURN NEW;
END $$`)
	require.NoError(t, err)
	db.OnOutcomes(t, "refuse_outcome")
}
