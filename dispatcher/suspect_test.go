package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestSuspectsRunOneAtATimeMarkedRightBefore: events recovered before
// (suspects: a poison event's worker died with them) are not marked
// started by their claim, and their handlers run one at a time, each
// marked right before it: while one suspect runs, no other suspect's row
// is PROCESSING with a started attempt, also while the outcome of the
// one before is still being published and written. So a poison event
// that kills its process charges a recovery to no suspect but itself, and
// innocents recovered with it are not dead-lettered with it after
// MaxRecoveries deaths. An event never recovered runs beside them.
func TestSuspectsRunOneAtATimeMarkedRightBefore(t *testing.T) {
	t.Parallel()
	for _, publish := range []bool{false, true} {
		t.Run(fmt.Sprintf("publish=%v", publish), func(t *testing.T) {
			t.Parallel()
			problems := runSuspects(t, publish)
			require.Empty(t, problems)
		})
	}
}

// runSuspects runs 3 suspects and 1 other event through a dispatcher
// (publishing each handled event when publish) and returns what went
// wrong.
func runSuspects(t *testing.T, publish bool) []string {
	db := testdb.NewMigrated(t)
	suspects := insertSuspects(t, db, "t", 3)
	normal := insertEvents(t, db, "t", 1)[0]

	var mu sync.Mutex
	var problems []string
	running := 0
	note := func(p string) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, p)
	}
	done := make(chan struct{}, 4)
	cfg := baseConfig(db)
	cfg.Concurrency, cfg.BatchSize = 4, 10 // the claim would mark all 4 and start them together
	if publish {
		cfg.Publisher = &recordingPublisher{}
		cfg.RouteFunc = func(outbox.Event) string { return "dest" }
	}
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("t", func(ctx context.Context, e outbox.Event) error {
		defer func() { done <- struct{}{} }()
		if e.ID == normal {
			return nil
		}
		mu.Lock()
		if running++; running > 1 {
			problems = append(problems, "suspects ran beside each other")
		}
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		rows, err := db.Pool.Query(ctx, `SELECT id FROM outbox_events
			WHERE id = ANY($1) AND id <> $2 AND status = 'PROCESSING' AND started_at IS NOT NULL`, suspects, e.ID)
		if err != nil {
			return err
		}
		others, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if len(others) > 0 {
			note(fmt.Sprintf("suspect %s ran while suspects %v showed a started attempt", e.ID, others))
		}
		time.Sleep(30 * time.Millisecond) // long enough for another suspect to start beside it
		return err
	}))
	runDispatcher(t, d)
	for range 4 {
		receive(t, "the events all handled", done)
	}
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == 4 })
	mu.Lock()
	defer mu.Unlock()
	return problems
}

// TestStuckSuspectHoldsUpNoOtherEvent: a suspect whose handler does not
// return (it ignores its context) holds the suspect turn, but the other
// events of its dispatcher still run, and the suspects waiting for the
// turn are released unstarted after LeaseDuration (TestSuspectsWaitALeaseForTheTurn
// checks that default), uncharged, instead of
// being held under renewed leases. The wait for the turn is shortened to
// 1s under a lease of a minute: with a lease of 1s, a machine loaded past
// two thirds of a second between beats let a lease lapse, and its
// recovery charged a suspect (or gave the stuck one's turn back).
func TestStuckSuspectHoldsUpNoOtherEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.Concurrency, cfg.BatchSize = 4, 10
	cfg.LeaseDuration = time.Minute
	dispatcher.SetSuspectWait(&cfg, time.Second)
	d := runStuckSuspect(t, db, cfg, "t", "other")
	waiting := insertSuspects(t, db, "t", 3)
	others := insertEvents(t, db, "other", 2)

	waitFor(t, "the other events SENT", func() bool {
		var sent int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE id = ANY($1) AND status = 'SENT'`, others).Scan(&sent))
		return sent == len(others)
	})
	awaiting := true // the dump below is for a failure of this wait
	t.Cleanup(func() {
		if !awaiting || !t.Failed() {
			return
		}
		rows, err := db.Pool.Query(ctx, `SELECT event_type || ' ' || status || ' ' || recoveries || ' ' || coalesce(lock_owner, '') FROM `+testdb.AllRows(db.Table())+` AS e`)
		require.NoError(t, err)
		state, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		t.Logf("the waiting suspects were not released: %+v %v", d.Stats(), state)
	})
	waitFor(t, "the waiting suspects released", func() bool { return d.Stats().Released >= uint64(len(waiting)) })
	awaiting = false
	var charged int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE id = ANY($1) AND (recoveries <> 1 OR attempts <> 0 OR status <> 'PENDING' AND status <> 'PROCESSING')`, waiting).Scan(&charged))
	require.Zero(t, charged, "a suspect released unstarted was charged")
}

// TestWaitingSuspectDelaysNoBatchMate: a suspect waiting for the turn
// (another suspect's handler does not return) does not hold up the
// publish of the events claimed in its batch: they are SENT long before
// the waiting suspect is released, LeaseDuration later.
func TestWaitingSuspectDelaysNoBatchMate(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.LeaseDuration = time.Minute
	cfg.Publisher = &recordingPublisher{}
	cfg.RouteFunc = func(outbox.Event) string { return "dest" }
	runStuckSuspect(t, db, cfg, "t")

	// One statement: the suspect and its batch-mates are claimed together.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (id, event_type, payload, recoveries)
		SELECT gen_random_uuid(), 't', '\x7b7d', CASE WHEN g = 0 THEN 1 ELSE 0 END FROM generate_series(0, 3) AS g`)
	require.NoError(t, err)
	waitFor(t, "the suspect's batch-mates SENT", func() bool { // the suspect waits a minute
		return statusCounts(t, db)[outbox.StatusSent] == 3
	})
}

// insertSuspects commits n events of the given type that were recovered
// before (suspects) and returns their IDs. One statement: inserted first
// and marked recovered by a second one, they could be claimed in between
// as ordinary events by a dispatcher already polling (as in
// TestStuckSuspectHoldsUpNoOtherEvent, whose waiting suspects then ended
// SENT instead of released).
func insertSuspects(tb testing.TB, db *testdb.DB, eventType string, n int) []uuid.UUID {
	tb.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (id, event_type, payload, recoveries)
		SELECT id, $2, '\x7b7d', 1 FROM unnest($1::uuid[]) AS id`, ids, eventType)
	require.NoError(tb, err)
	return ids
}

// TestInsertSuspectsCommitsSuspectsOnly: the helper's rows are suspects
// from the moment they are visible, so that a dispatcher polling beside
// it never claims one as an ordinary event. A trigger records what each
// inserted row was when it was inserted. (Inserted first and marked
// recovered by a second statement, the rows could be claimed in between:
// TestStuckSuspectHoldsUpNoOtherEvent's waiting suspects then ran as
// ordinary events and ended SENT instead of released, a flake under load.)
func TestInsertSuspectsCommitsSuspectsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `
CREATE TABLE inserted (recoveries int);
CREATE FUNCTION note_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO inserted VALUES (NEW.recoveries); RETURN NEW; END $$;
CREATE TRIGGER note_inserted AFTER INSERT ON outbox_events FOR EACH ROW EXECUTE FUNCTION note_inserted();`)
	require.NoError(t, err)
	insertSuspects(t, db, "t", 3)
	rows, err := db.Pool.Query(ctx, `SELECT recoveries FROM inserted`)
	require.NoError(t, err)
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{1, 1, 1}, inserted, "a row was visible as an ordinary event")
}

// TestSuspectsHoldUpNoOtherEvent: suspects run one at a time, but the
// events due behind them do not wait for their drain: a dispatcher holds
// a batch of suspects waiting for the turn beside its room for other
// events, and its claims then leave suspects for later. Here a stuck
// suspect holds the turn and 200 suspects are due before 20 other events:
// the other events are SENT within 200 poll cycles, while every suspect
// still waits (before, the waiting suspects filled the room and the other
// events waited for the suspects' drain, here for ever).
func TestSuspectsHoldUpNoOtherEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.Concurrency, cfg.BatchSize = 4, 10
	cfg.LeaseDuration = time.Minute
	d := runStuckSuspect(t, db, cfg, "t", "other")
	waiting := insertSuspects(t, db, "t", 200)
	others := insertEvents(t, db, "other", 20)

	polls := d.Stats().PollCycles
	waitFor(t, "the other events SENT", func() bool {
		require.Less(t, d.Stats().PollCycles, polls+200, "the other events were not SENT within 200 poll cycles")
		var sent int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE id = ANY($1) AND status = 'SENT'`, others).Scan(&sent))
		return sent == len(others)
	})
	var started int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE id = ANY($1) AND (status <> 'PENDING' AND status <> 'PROCESSING' OR started_at IS NOT NULL)`, waiting).Scan(&started))
	require.Zero(t, started, "a suspect started beside the stuck one")
	require.LessOrEqual(t, d.Stats().InFlight, 1+cfg.BatchSize+cfg.Concurrency+2*cfg.BatchSize, "held: the stuck suspect, a batch of waiting suspects, the room")
}

// TestMeasureSuspectDrain measures how fast a dispatcher drains suspects
// (one at a time, see suspect.go) beside ordinary events: 2,000 suspects
// and 2,000 other events, no-op handlers. It runs only when
// PGOUTBOX_MEASURE is set:
//
//	PGOUTBOX_MEASURE=1 go test -count=1 -run TestMeasureSuspectDrain -v ./dispatcher/
func TestMeasureSuspectDrain(t *testing.T) {
	if os.Getenv("PGOUTBOX_MEASURE") == "" {
		t.Skip("a measurement: set PGOUTBOX_MEASURE=1")
	}
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	suspects := insertSuspects(t, db, "t", 2000)
	others := insertEvents(t, db, "t", 2000)
	cfg := baseConfig(db)
	d, err := dispatcher.New(db.NewPool(t, 8), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("t", func(context.Context, outbox.Event) error { return nil }))
	sentOf := func(ids []uuid.UUID) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE id = ANY($1) AND status = 'SENT'`, ids).Scan(&n))
		return n
	}
	start := time.Now()
	runDispatcher(t, d)
	var othersDone time.Duration
	waitFor(t, "every event SENT", func() bool {
		if othersDone == 0 && sentOf(others) == len(others) {
			othersDone = time.Since(start)
		}
		return sentOf(suspects) == len(suspects)
	})
	all := time.Since(start)
	if othersDone == 0 {
		othersDone = all
	}
	t.Logf("2,000 suspects drained in %s (%.0f/s); the 2,000 other events were SENT after %s",
		all.Round(time.Millisecond), 2000/all.Seconds(), othersDone.Round(time.Millisecond))
}

// runStuckSuspect runs a dispatcher of cfg with no-op handlers for
// eventTypes, and returns it once the handler of a suspect of type
// "stuck", which does not return until the test ends, holds the suspect
// turn.
func runStuckSuspect(t *testing.T, db *testdb.DB, cfg dispatcher.Config, eventTypes ...string) *dispatcher.Dispatcher {
	t.Helper()
	insertSuspects(t, db, "stuck", 1)
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, d.Handle("stuck", func(context.Context, outbox.Event) error {
		close(started)
		<-release
		return nil
	}))
	for _, eventType := range eventTypes {
		require.NoError(t, d.Handle(eventType, func(context.Context, outbox.Event) error { return nil }))
	}
	runDispatcher(t, d)
	t.Cleanup(func() { close(release) }) // before the dispatcher's Stop
	<-started
	return d
}

// TestPoisonEventTakesNoInnocentDown: an event whose handler kills its
// worker every time is FAILED worker_lost after MaxRecoveries (3)
// deaths, and the events claimed and run beside it at its first death,
// charged once then, are not dead-lettered with it: from then on they are
// suspects, which no claim marks and which never run beside the poison
// event, so its further deaths do not charge them (docs/guarantees.md).
func TestPoisonEventTakesNoInnocentDown(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	poison := insertEvents(t, db, "poison", 1)[0]
	innocents := insertEvents(t, db, "innocent", 2)
	for death := range 4 { // one claim, then one per recovery
		kp := newKillablePool(t, db)
		cfg := baseConfig(db)
		// A lease of 3s: a victim trusts it for 4/5 of that after its claim,
		// and a suspect's start mark and turn come in between. With 1s, a
		// machine loaded by three CI runs at once let the trust lapse before
		// the poison event's handler began: it never started, its start mark
		// charged a fourth recovery, and the loop waited for a start that
		// could not come.
		cfg.LeaseDuration, cfg.RecoverEvery, cfg.Owner = 3*time.Second, 1, kp.app
		d, err := dispatcher.New(kp.Pool, cfg)
		require.NoError(t, err)
		started := make(chan struct{}, 3)
		block := func(ctx context.Context, _ outbox.Event) error {
			select {
			case started <- struct{}{}:
			default: // a start beyond those the test waits for
			}
			<-ctx.Done() // until the worker's death
			return ctx.Err()
		}
		require.NoError(t, d.Handle("poison", block))
		require.NoError(t, d.Handle("innocent", func(ctx context.Context, e outbox.Event) error {
			if death == 0 { // they run beside the poison event at its first death
				return block(ctx, e)
			}
			select { // long enough to be cut by a death beside the poison event
			case <-time.After(200 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		errc := make(chan error, 1)
		go func() { errc <- d.Run(context.Background()) }()
		want := 1 // the poison event's handler
		if death == 0 {
			want = 3 // and the innocents' beside it
		}
		for range want {
			receive(t, fmt.Sprintf("death %d: the victim's handlers to start", death), started)
		}
		stopVictim(t, db, d, kp, errc)
	}

	cfg := baseConfig(db)
	cfg.RecoverEvery = 1
	survivor, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, survivor.Handle("poison", func(context.Context, outbox.Event) error { return nil }))
	require.NoError(t, survivor.Handle("innocent", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, survivor)
	waitFor(t, "every event SENT or FAILED", func() bool {
		counts := statusCounts(t, db)
		return counts[outbox.StatusSent]+counts[outbox.StatusFailed] == 3
	})
	require.Equal(t, row{Status: outbox.StatusFailed, Recoveries: 4, Code: "worker_lost"}, readRow(t, db, poison))
	for _, id := range innocents {
		require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1, Recoveries: 1, Code: "worker_lost"}, readRow(t, db, id),
			"an innocent is charged at the poison event's first death only")
	}
}
