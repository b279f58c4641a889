package integration_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
	"github.com/pgoutbox/pgoutbox/integration/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The fault-injection scenarios (issue 13): each starts a PostgreSQL
// cluster of its own (pgcluster), dispatcher replicas as child processes
// (this test binary run again in the role roleChaosReplica) and writers
// in this process, injects its faults for a while, lets the outbox drain,
// and hands everything recorded to chaos.Check, which must find no
// violation of docs/guarantees.md. docs/reliability.md explains each
// scenario and publishes its figures (`make chaos` rewrites them).

// The replica's role and what it reads, besides envChildURL and
// envChildSchema: its chaosReplicaConfig, as JSON.
const (
	roleChaosReplica = "chaos-replica"
	envChaosReplica  = "PGOUTBOX_IT_CHAOS_REPLICA"

	// envChaosDuration, a Go duration, sets how long each scenario injects
	// faults (`make chaos`); unset, the short version runs.
	envChaosDuration = "PGOUTBOX_CHAOS_DURATION"
	// envChaosFigures names the docs/reliability.md whose figures the
	// scenarios rewrite (`make chaos` sets it); unset, nothing is written.
	envChaosFigures = "PGOUTBOX_CHAOS_FIGURES"

	chaosSchema    = "chaos"
	chaosEventType = "chaos.ledger"
	chaosStats     = "stats" // the replica's last line: "stats <goroutines> <heap bytes>"
	chaosShort     = 12 * time.Second
	chaosDrain     = 90 * time.Second // the most a scenario waits for the outbox to drain without progress
	// chaosMaxGoroutines is the most goroutines a replica may have left
	// once its dispatcher returned, its pool closed and its stdin reader
	// ended: main, and one of slack (measured: 1).
	chaosMaxGoroutines = 2
)

func init() { runChildRole(roleChaosReplica, childChaosReplica) }

// chaosScenario is what one scenario configures.
type chaosScenario struct {
	name     string // its key in docs/reliability.md
	replicas int
	writers  int
	lease    time.Duration
	// deaf handlers ignore their context: they run to their end however
	// long a pause made them take.
	deaf bool
	// concurrency is the replicas' Concurrency; 0 for the default.
	concurrency int
	// batchSize is the replicas' BatchSize; 0 for the default.
	batchSize int
	// latencyMin and latencyMax bound each handler call's random
	// latency; both 0 for 2-20ms.
	latencyMin, latencyMax time.Duration
	// txEvents is the most events one writer transaction emits; 0 for 3.
	txEvents int
	// minEvents is how many committed events the fault phase lasts for at
	// least: it ends once the fault time is over and the ledger holds that
	// many. 0: the fault time alone.
	minEvents int
	// drain is the most the scenario waits for the outbox to drain
	// without progress (fewer open rows); 0 for chaosDrain.
	drain time.Duration
	// noFaults says the scenario injects no fault on purpose.
	noFaults bool
	// inject runs the faults until ctx ends (the fault phase's end) and
	// returns when every fault it injected has healed; the writers write
	// until then.
	inject func(ctx context.Context, h *chaosHarness)
	// delivery and deleteSent are the replicas' Delivery and DeleteSent.
	delivery   dispatcher.Delivery
	deleteSent bool
	// poisonEvery, when positive, makes about one event in poisonEvery a
	// poison event, whose handler SIGKILLs its own replica at every start;
	// the harness restarts replicas that die (see chaos_modes_test.go).
	poisonEvery int
	// setup, when set, runs once the cluster is up and before the
	// replicas start: it may route the replicas elsewhere (h.replicaURL,
	// h.listenerURL). The writers and the checker always connect directly.
	setup func(h *chaosHarness)
}

// chaosHarness is a running scenario: the cluster, the replicas, the
// writers and what they recorded.
type chaosHarness struct {
	t       *testing.T
	sc      chaosScenario
	cluster *pgcluster.Cluster
	pool    *pgxpool.Pool
	dir     string // the replicas' record files

	mu         sync.Mutex
	slots      []*chaosReplica // the replica process of each slot, replaced when killed
	kills      []chaos.Kill
	pauses     []chaos.Pause
	outages    []chaos.Outage
	faults     map[string]int
	rolledBack []uuid.UUID
	stats      []chaos.ReplicaStats
	poison     []uuid.UUID // the poison events emitted, committed or not

	// replicaURL, when set by the scenario's setup, is the URL the
	// replica of a slot connects to instead of the cluster's.
	replicaURL func(slot int) string
	// listenerURL, when set by the scenario's setup, is the URL of the
	// replicas' listener connections.
	listenerURL string
}

// chaosReplica is one replica process.
type chaosReplica struct {
	name string
	c    *childProcess
}

// chaosFaultTime is how long a scenario injects faults.
func chaosFaultTime(t *testing.T) time.Duration {
	s := os.Getenv(envChaosDuration)
	if s == "" {
		return chaosShort
	}
	d, err := time.ParseDuration(s)
	require.NoError(t, err, envChaosDuration)
	return d
}

// chaosLong reports whether the long versions run (`make chaos`).
func chaosLong() bool { return os.Getenv(envChaosDuration) != "" }

// untilFaultsEnd runs cycle once in the short version; in the long one,
// again and again until ctx (the fault phase) ends.
func untilFaultsEnd(ctx context.Context, cycle func()) {
	for {
		cycle()
		if ctx.Err() != nil || !chaosLong() {
			return
		}
	}
}

// runChaos runs sc: setup, replicas and writers, faults, drain, check.
func runChaos(t *testing.T, sc chaosScenario) chaos.Report {
	require.GreaterOrEqual(t, sc.drainLimit(), 2*sc.lease, "the drain must outlast lease recovery")
	// No cap of its own beyond the run's budget (testctx): the fault phase
	// and the drain bound themselves by progress.
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	h := newChaosHarness(t, ctx, sc)
	if sc.setup != nil {
		sc.setup(h)
	}
	for i := range sc.replicas {
		h.slots = append(h.slots, h.startReplica(i, 1))
	}
	faultCtx, stopFaults := h.faultPhase(ctx, chaosFaultTime(t))
	defer stopFaults()
	stopRestarts := h.restartDead(ctx)
	writeCtx, stopWriters := context.WithCancel(ctx)
	writersDone := h.startWriters(writeCtx)
	sc.inject(faultCtx, h)
	stopWriters()
	writersDone.Wait()
	faultsEnded := time.Now()
	drained := h.awaitDrain(ctx)
	stopRestarts()
	h.stopReplicas()
	rep := chaos.Check(h.input(ctx, faultsEnded, drained))
	t.Logf("scenario %s:\n%s", sc.name, rep)
	writeChaosFigures(t, sc.name, rep)
	require.Empty(t, rep.Violations(), "scenario %s breaks docs/guarantees.md:\n%s", sc.name, rep)
	for status := range rep.Statuses {
		// The handlers never fail: only recovery may dead-letter an event.
		require.Contains(t, []string{"SENT", "FAILED worker_lost"}, status, "scenario %s:\n%s", sc.name, rep)
	}
	faults := 0
	for _, n := range h.faults {
		faults += n
	}
	if !sc.noFaults {
		require.Positive(t, faults, "no fault was injected: the scenario did not happen")
	}
	require.GreaterOrEqual(t, rep.Events, sc.minEvents, "the writers fell short of the events required")
	return rep
}

// drainLimit is the most sc waits for the outbox to drain without
// progress.
func (sc chaosScenario) drainLimit() time.Duration {
	return cmp.Or(sc.drain, chaosDrain)
}

// faultPhase returns a context that ends once d has passed and the
// ledger holds h.sc.minEvents committed events, or when ctx ends.
func (h *chaosHarness) faultPhase(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	faultCtx, stop := context.WithCancel(ctx)
	go func() {
		sleepCtx(faultCtx, d)
		for faultCtx.Err() == nil && h.committed(faultCtx) < h.sc.minEvents {
			sleepCtx(faultCtx, 500*time.Millisecond)
		}
		stop()
	}()
	return faultCtx, stop
}

// committed counts the ledger's rows; -1 when the server cannot say (it
// may be restarting).
func (h *chaosHarness) committed(ctx context.Context) int {
	var n int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM chaos.ledger`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// newChaosHarness starts the cluster, migrates the outbox, creates the
// ledger and installs the transition log.
func newChaosHarness(t *testing.T, ctx context.Context, sc chaosScenario) *chaosHarness {
	t.Helper()
	cluster := pgcluster.Start(t)
	pool := chaosPool(t, ctx, cluster.URL, "checker")
	table := outbox.Table{Schema: chaosSchema}
	require.NoError(t, migrations.Migrate(ctx, pool, migrations.Config{Table: table}))
	_, err := pool.Exec(ctx, `CREATE TABLE chaos.ledger (event_id uuid PRIMARY KEY, writer int NOT NULL)`)
	require.NoError(t, err)
	require.NoError(t, chaos.InstallTransitionLog(ctx, pool, chaosSchema, outbox.DefaultTable))
	return &chaosHarness{t: t, sc: sc, cluster: cluster, pool: pool, dir: t.TempDir(), faults: map[string]int{}}
}

// chaosPool opens a pool on url whose sessions are named name.
func chaosPool(t *testing.T, ctx context.Context, url, name string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// chaosReplicaConfig is what a replica process is told: its name and
// record file, and its scenario's replica settings.
type chaosReplicaConfig struct {
	Name        string // Owner and application_name
	Records     string // its record file
	Lease       time.Duration
	Deaf        bool // its handler ignores its context
	Concurrency int  // 0 for the default
	BatchSize   int  // 0 for the default
	Delivery    dispatcher.Delivery
	DeleteSent  bool
	// LatencyMin and LatencyMax bound its handler's latency; both 0 for
	// 2-20ms.
	LatencyMin, LatencyMax time.Duration
	// Listener, when set, is the URL of its listener connection
	// (dispatcher.Config.ListenerConnConfig); "" for the pool's.
	Listener string
}

// startReplica starts the replica process of slot i, its incarnation n.
func (h *chaosHarness) startReplica(i, n int) *chaosReplica {
	name := fmt.Sprintf("r%d.%d", i+1, n)
	db := &pgtest.DB{URL: h.cluster.URL, Schema: chaosSchema}
	if h.replicaURL != nil {
		db.URL = h.replicaURL(i)
	}
	cfg, err := json.Marshal(chaosReplicaConfig{
		Name: name, Records: filepath.Join(h.dir, name+".log"),
		Lease: h.sc.lease, Deaf: h.sc.deaf, Concurrency: h.sc.concurrency, BatchSize: h.sc.batchSize,
		Delivery: h.sc.delivery, DeleteSent: h.sc.deleteSent,
		LatencyMin: h.sc.latencyMin, LatencyMax: h.sc.latencyMax, Listener: h.listenerURL,
	})
	require.NoError(h.t, err)
	c := startChild(h.t, db, roleChaosReplica, envChaosReplica+"="+string(cfg))
	return &chaosReplica{name: name, c: c}
}

// startWriters runs the scenario's writers until ctx ends.
func (h *chaosHarness) startWriters(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range h.sc.writers {
		pool := chaosPool(h.t, context.Background(), h.cluster.URL, fmt.Sprintf("writer-%d", w+1))
		wg.Go(func() { h.write(ctx, pool, w+1) })
	}
	return &wg
}

// write commits business transactions until ctx ends: each inserts 1 to
// 3 (sc.txEvents) ledger rows and emits their events; one in five is rolled back on
// purpose. Errors (the server restarting) are retried; whether a
// transaction whose commit failed did commit is for the ledger to say.
func (h *chaosHarness) write(ctx context.Context, pool *pgxpool.Pool, writer int) {
	em, err := emitter.New(emitter.Config{Table: outbox.Table{Schema: chaosSchema}})
	if err != nil {
		panic(err) // a fixed, valid configuration
	}
	emitted, nextPoison := 0, 3
	for ctx.Err() == nil {
		events := make([]outbox.Event, 1+rand.IntN(cmp.Or(h.sc.txEvents, 3)))
		ids := make([]uuid.UUID, len(events))
		for i := range events {
			ids[i] = uuid.Must(uuid.NewV7())
			events[i] = outbox.Event{ID: ids[i], Type: chaosEventType, Payload: []byte(strconv.Itoa(writer))}
		}
		rollback := rand.IntN(5) == 0
		if h.sc.poisonEvery > 0 && !rollback && emitted >= nextPoison {
			// one event of a transaction meant to commit: every writer
			// emits one early, and one in poisonEvery after it
			events[0].Payload = []byte(chaosPoison)
			nextPoison += h.sc.poisonEvery
			h.mu.Lock()
			h.poison = append(h.poison, ids[0])
			h.mu.Unlock()
		}
		emitted += len(events)
		err := h.commit(ctx, pool, em, ids, events, writer, rollback)
		if errors.Is(err, errRollback) {
			h.mu.Lock()
			h.rolledBack = append(h.rolledBack, ids...)
			h.mu.Unlock()
		}
		sleepCtx(ctx, 5*time.Millisecond)
	}
}

// errRollback rolls a writer's transaction back on purpose.
var errRollback = errors.New("rolled back on purpose")

// commit runs one business transaction of writer: the ledger rows ids and
// their events, rolled back on purpose when rollback. The end of ctx (of
// the writing) does not cut a transaction short: a COMMIT cancelled in
// flight may still commit after the outbox was seen drained, leaving
// events that no replica ran (seen in CI).
func (h *chaosHarness) commit(ctx context.Context, pool *pgxpool.Pool, em *emitter.Emitter, ids []uuid.UUID,
	events []outbox.Event, writer int, rollback bool,
) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO chaos.ledger (event_id, writer) SELECT unnest($1::uuid[]), $2`, ids, writer); err != nil {
			return err
		}
		if _, err := em.Emit(ctx, tx, events...); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// randBetween returns a random duration in [lo, hi).
func randBetween(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo)
}

// awaitDrain waits until no outbox row is PENDING or PROCESSING and
// returns when that was first seen; zero when the scenario's drain limit
// (chaosDrain) passed with no progress, or ctx ended. The limit runs from
// the last progress seen (fewer open rows than ever before), so a loaded
// machine that drains slowly is waited for, and one that stopped draining
// is not.
// The server may still be coming back: errors are retried.
func (h *chaosHarness) awaitDrain(ctx context.Context) time.Time {
	deadline := time.Now().Add(h.sc.drainLimit())
	fewest := -1
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var open int
		err := h.pool.QueryRow(ctx, `SELECT count(*) FROM chaos.outbox_events WHERE status IN ('PENDING', 'PROCESSING')`).Scan(&open)
		switch {
		case err == nil && open == 0:
			return time.Now()
		case err == nil && (fewest < 0 || open < fewest):
			fewest = open
			deadline = time.Now().Add(h.sc.drainLimit())
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return time.Time{}
}

// stopReplicas stops every replica cleanly (its stdin closes) and keeps
// the stats it prints last.
func (h *chaosHarness) stopReplicas() {
	for _, r := range h.slots {
		_ = r.c.stdin.Close()
	}
	for _, r := range h.slots {
		var stats chaos.ReplicaStats
		for {
			line, err := r.c.stdout.ReadString('\n')
			if f := strings.Fields(line); len(f) == 3 && f[0] == chaosStats {
				stats.Replica = r.name
				stats.Goroutines, _ = strconv.Atoi(f[1])
				stats.HeapBytes, _ = strconv.ParseUint(f[2], 10, 64)
			}
			if err != nil {
				break
			}
		}
		err := r.c.cmd.Wait()
		require.NoError(h.t, err, "replica %s did not stop cleanly: %s", r.name, r.c.stderr)
		require.NotEmpty(h.t, stats.Replica, "replica %s printed no stats: %s", r.name, r.c.stderr)
		h.stats = append(h.stats, stats)
	}
}

// input gathers what the scenario recorded.
func (h *chaosHarness) input(ctx context.Context, faultsEnded, drained time.Time) chaos.Input {
	t := h.t
	rows, err := h.pool.Query(ctx, `SELECT event_id FROM chaos.ledger`)
	require.NoError(t, err)
	ledger, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	rows, err = h.pool.Query(ctx, `SELECT id, status, coalesce(last_error_code, ''), attempts, recoveries FROM `+
		testdb.AllRows(outbox.Table{Schema: chaosSchema})+` AS e`)
	require.NoError(t, err)
	final, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (chaos.Row, error) {
		var x chaos.Row
		err := r.Scan(&x.ID, &x.Status, &x.Code, &x.Attempts, &x.Recoveries)
		return x, err
	})
	require.NoError(t, err)
	transitions, err := chaos.ReadTransitions(ctx, h.pool, chaosSchema)
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(h.dir, "*.log"))
	require.NoError(t, err)
	records, err := chaos.ReadRecords(files...)
	require.NoError(t, err)
	return chaos.Input{
		Ledger: ledger, RolledBack: h.rolledBack, Records: records, Transitions: transitions, Rows: final,
		Kills: h.kills, Pauses: h.pauses, Outages: h.outages, Faults: h.faults, Lease: h.sc.lease,
		FaultsEnded: faultsEnded, Drained: drained,
		Deadlocks:     strings.Count(h.cluster.ServerLog(), "deadlock detected"),
		Replicas:      h.stats,
		MaxGoroutines: chaosMaxGoroutines,
		AtMostOnce:    h.sc.delivery == dispatcher.AtMostOnce,
		DeleteSent:    h.sc.deleteSent,
		Poison:        h.poison, PoisonStatus: "FAILED worker_lost", PoisonMaxStarts: chaosMaxRecoveries + 1,
	}
}

// childChaosReplica is a replica: one dispatcher on the scenario's
// outbox, configured by its chaosReplicaConfig, whose handler records its
// start and end (chaos.Recorder) and takes LatencyMin to LatencyMax. It
// runs until killed or until its stdin closes; then it stops, closes its
// pool and prints its goroutines and heap.
// runRetryingConnect runs d, starting it again while its start fails to
// connect: a replica started while the server restarts or its PgBouncer
// is down waits for it, as a supervised service would be restarted,
// rather than leaving the scenario one replica short.
func runRetryingConnect(ctx context.Context, d *dispatcher.Dispatcher) error {
	for {
		err := d.Run(ctx)
		var connect *pgconn.ConnectError
		if err == nil || ctx.Err() != nil || !errors.As(err, &connect) || d.Health().State != dispatcher.StateNew {
			return err
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func childChaosReplica() error {
	var rc chaosReplicaConfig
	if err := json.Unmarshal([]byte(os.Getenv(envChaosReplica)), &rc); err != nil {
		return err
	}
	if rc.LatencyMax == 0 {
		rc.LatencyMin, rc.LatencyMax = 2*time.Millisecond, 20*time.Millisecond
	}
	rec, err := chaos.NewRecorder(rc.Records, rc.Name)
	if err != nil {
		return err
	}
	defer func() { _ = rec.Close() }()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(envChildURL))
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = rc.Name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	var listener *pgx.ConnConfig
	if rc.Listener != "" {
		if listener, err = pgx.ParseConfig(rc.Listener); err != nil {
			return err
		}
		listener.RuntimeParams["application_name"] = rc.Name
	}
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:              outbox.Table{Schema: os.Getenv(envChildSchema)},
		Owner:              rc.Name,
		LeaseDuration:      rc.Lease,
		Concurrency:        rc.Concurrency,
		Delivery:           rc.Delivery,
		DeleteSent:         rc.DeleteSent,
		BatchSize:          rc.BatchSize,
		PollInterval:       50 * time.Millisecond,
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ListenerConnConfig: listener,
	})
	if err != nil {
		return err
	}
	if err := d.Handle(chaosEventType, recordingHandler(rec, rc.Deaf, rc.LatencyMin, rc.LatencyMax)); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	stdinClosed := make(chan struct{})
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
		}
		stop()
		close(stdinClosed)
	}()
	fmt.Println(childReady)
	runErr := runRetryingConnect(runCtx, d)
	pool.Close()
	<-stdinClosed
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("%s %d %d\n", chaosStats, runtime.NumGoroutine(), ms.HeapAlloc)
	return runErr
}

// recordingHandler records its start, takes lo to hi (less when its
// context ends first, unless deaf: then it records Abort and returns the
// context's error) and records its end. A record it cannot write stops
// the process: the scenario's records would be incomplete.
func recordingHandler(rec *chaos.Recorder, deaf bool, lo, hi time.Duration) outbox.Handler {
	write := func(e outbox.Event, ph chaos.Phase) {
		if err := rec.Write(e.ID, e.Attempt, ph); err != nil {
			fmt.Fprintln(os.Stderr, "child: record:", err)
			os.Exit(3)
		}
	}
	return func(ctx context.Context, e outbox.Event) error {
		write(e, chaos.Start)
		if string(e.Payload) == chaosPoison {
			killSelf()
		}
		done := ctx.Done()
		if deaf {
			done = nil
		}
		select {
		case <-time.After(randBetween(lo, hi)):
		case <-done:
			write(e, chaos.Abort)
			return ctx.Err()
		}
		write(e, chaos.End)
		return nil
	}
}

// kill SIGKILLs the replica of slot i and starts its next incarnation.
func (h *chaosHarness) kill(i int) {
	h.mu.Lock()
	r := h.slots[i]
	h.mu.Unlock()
	killed := time.Now()
	require.NoError(h.t, r.c.cmd.Process.Kill())
	h.replace(i, r, killed, "SIGKILLs")
}

// replace reaps the replica r of slot i, which was SIGKILLed at killed,
// starts its next incarnation and counts the kill as a fault of kind.
// The kill is recorded at killed or at the last record r wrote, whichever
// is later: until the signal lands the process still runs (on the other
// core, or when this goroutine is descheduled between reading the clock
// and sending the signal) and may stamp a start after killed, and a run
// left open by that would seem to overlap its next run on another
// replica. It wrote nothing after its death, which came before the reap.
func (h *chaosHarness) replace(i int, r *chaosReplica, killed time.Time, kind string) {
	requireKilled(h.t, r.c.cmd.Wait(), r.c)
	if reaped := time.Since(killed); reaped > 100*time.Millisecond {
		h.t.Logf("the kill of %s took %v to reap", r.name, reaped)
	}
	if last := h.lastRecordAt(r); last.After(killed) {
		killed = last
	}
	n, _ := strconv.Atoi(r.name[strings.IndexByte(r.name, '.')+1:])
	next := h.startReplica(i, n+1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kills = append(h.kills, chaos.Kill{Replica: r.name, At: killed})
	h.faults[kind]++ // h.mu is held
	h.slots[i] = next
}

// pause SIGSTOPs the replica of slot i for d, then SIGCONTs it.
func (h *chaosHarness) pause(i int, d time.Duration) {
	h.mu.Lock()
	r := h.slots[i]
	h.mu.Unlock()
	from := time.Now()
	require.NoError(h.t, r.c.cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(d)
	require.NoError(h.t, r.c.cmd.Process.Signal(syscall.SIGCONT))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pauses = append(h.pauses, chaos.Pause{Replica: r.name, From: from, To: time.Now()})
	h.faults["SIGSTOPs"]++
}

// TestChaosKillReplicas: SIGKILL of a random replica (of 3) every 0.5-3s,
// restarted at once, while 2 writers commit and roll back events.
func TestChaosKillReplicas(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{
		name: "kill", replicas: 3, writers: 2, lease: time.Second,
		inject: killReplicas,
	})
}

// killReplicas SIGKILLs a random replica every 0.5-3s and restarts it,
// until ctx ends: the kill scenario's schedule, which others reuse.
func killReplicas(ctx context.Context, h *chaosHarness) {
	atRandomIntervals(ctx, 500*time.Millisecond, 3*time.Second, func() { h.kill(rand.IntN(h.sc.replicas)) })
}

// chaosFiguresMu serialises the scenarios' rewrites of docs/reliability.md.
var chaosFiguresMu sync.Mutex

// writeChaosFigures replaces the figures table of scenario name in the
// file envChaosFigures names, between the lines
// "<!-- chaos:NAME -->" and "<!-- /chaos:NAME -->". Unset, it does
// nothing. rep is a chaos.Report or a chaos.RelayReport.
func writeChaosFigures(t *testing.T, name string, rep interface{ Figures() [][2]string }) {
	path := os.Getenv(envChaosFigures)
	if path == "" {
		return
	}
	chaosFiguresMu.Lock()
	defer chaosFiguresMu.Unlock()
	body, err := os.ReadFile(path)
	require.NoError(t, err)
	begin, end := "<!-- chaos:"+name+" -->\n", "<!-- /chaos:"+name+" -->"
	i, j := strings.Index(string(body), begin), strings.Index(string(body), end)
	require.True(t, i >= 0 && j > i, "%s has no %q ... %q section", path, begin, end)
	var table strings.Builder
	fmt.Fprintf(&table, "| figure | value |\n| --- | --- |\n")
	fmt.Fprintf(&table, "| run | %s, %s of faults, %s |\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		chaosFaultTime(t), runtime.GOOS+"/"+runtime.GOARCH)
	for _, f := range rep.Figures() {
		fmt.Fprintf(&table, "| %s | %s |\n", f[0], f[1])
	}
	out := string(body[:i]) + begin + table.String() + string(body[j:])
	require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
}

// pauseReplicas SIGSTOPs a random replica for 2-3 leases, then SIGCONTs
// it and waits 0.5-1.5s before the next, until ctx ends.
func pauseReplicas(ctx context.Context, h *chaosHarness) {
	atRandomIntervals(ctx, 500*time.Millisecond, 1500*time.Millisecond, func() {
		h.pause(rand.IntN(h.sc.replicas), randBetween(2*h.sc.lease, 3*h.sc.lease))
	})
}

// atRandomIntervals runs fault after a random wait between lo and hi,
// again and again, until ctx ends (never after it ended).
func atRandomIntervals(ctx context.Context, lo, hi time.Duration, fault func()) {
	for {
		sleepCtx(ctx, randBetween(lo, hi))
		if ctx.Err() != nil {
			return
		}
		fault()
	}
}

// TestChaosPauseReplicas: a random replica (of 3) is SIGSTOPped for 2-3
// leases, then SIGCONTed, over and over, while 2 writers commit and roll
// back events. Its handlers honour their context: the dispatcher cancels
// it at the lease's local deadline, which passed during the pause.
func TestChaosPauseReplicas(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{name: "pause", replicas: 3, writers: 2, lease: time.Second, concurrency: 2, inject: pauseReplicas})
}

// TestChaosPauseReplicasDeafHandlers: TestChaosPauseReplicas with
// handlers that ignore their context: a handler caught by the pause runs
// to its end after the SIGCONT, beside the run another replica started,
// and its outcome must be fenced off.
func TestChaosPauseReplicasDeafHandlers(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{
		name: "pause-deaf", replicas: 3, writers: 2, lease: time.Second, concurrency: 2, deaf: true,
		inject: pauseReplicas,
	})
}

// TestChaosRestartServer: the throwaway cluster is restarted with
// `pg_ctl restart -m immediate` (a crash and crash recovery) three times,
// 0.5-1.5s apart, then stopped (immediate) and kept down for 5s, a cycle
// repeated until the fault time is over, while 3
// replicas and 2 writers run. Nobody helps them: they must recover by
// themselves. Writers see errors and go on; only committed ledger rows
// count.
func TestChaosRestartServer(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{
		name: "restart", replicas: 3, writers: 2, lease: time.Second,
		inject: func(ctx context.Context, h *chaosHarness) {
			untilFaultsEnd(ctx, func() { // a cycle takes about 10s
				for range 3 {
					time.Sleep(randBetween(500*time.Millisecond, 1500*time.Millisecond))
					h.outage("immediate restarts", h.cluster.RestartImmediate)
				}
				time.Sleep(randBetween(500*time.Millisecond, 1500*time.Millisecond))
				h.outage("5s outages", func() error {
					if err := h.cluster.Stop("immediate"); err != nil {
						return err
					}
					time.Sleep(5 * time.Second)
					return h.cluster.Start()
				})
			})
		},
	})
}

// TestChaosTerminateBackends: every 0.5-2s, pg_terminate_backend of
// every connection of every replica (3), the LISTEN connections included,
// while 2 writers commit and roll back events. Statements in flight fail,
// a completion may commit without its reply arriving, and the listeners
// must reconnect by themselves.
func TestChaosTerminateBackends(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{
		name: "terminate", replicas: 3, writers: 2, lease: time.Second,
		inject: func(ctx context.Context, h *chaosHarness) {
			atRandomIntervals(ctx, 500*time.Millisecond, 2*time.Second, func() { h.terminateReplicaBackends(ctx) })
		},
	})
}

// TestChaosReadOnlyDatabase: the database turns read-only for 10s
// (default_transaction_read_only on, a reload, and every replica
// connection terminated so that none keeps a transaction begun before),
// once in the short version and every 12s in `make chaos`, while 3
// replicas and 2 writers run. Claims, renewals and completions fail
// meanwhile; leases run out and are recovered afterwards.
func TestChaosReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosScenario{
		name: "read-only", replicas: 3, writers: 2, lease: time.Second,
		inject: func(ctx context.Context, h *chaosHarness) {
			untilFaultsEnd(ctx, func() {
				time.Sleep(randBetween(500*time.Millisecond, 1500*time.Millisecond))
				h.outage("10s read-only spells", func() error { return h.readOnlyFor(ctx, 10*time.Second) })
			})
		},
	})
}

// readOnlyFor makes the cluster's transactions read-only by default for d,
// terminating the replicas' sessions at the start. The spell is always
// lifted, also when ctx (the fault phase) ends meanwhile.
func (h *chaosHarness) readOnlyFor(ctx context.Context, d time.Duration) error {
	ctx = context.WithoutCancel(ctx)
	set := func(value string) error {
		conn, err := h.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		for _, sql := range []string{`SET default_transaction_read_only = off`,
			`ALTER SYSTEM SET default_transaction_read_only = ` + value, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	}
	if err := set("on"); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // the reload reaches every session
	h.terminateReplicaBackends(ctx)
	time.Sleep(d)
	return set("off")
}

// terminateReplicaBackends ends every server process of the replicas'
// sessions (named after the replicas, "r<slot>.<incarnation>") and
// records the moment as an instant outage, to which the checker
// attributes the duplicates it causes.
func (h *chaosHarness) terminateReplicaBackends(ctx context.Context) {
	ctx = context.WithoutCancel(ctx) // not cut short by the end of the fault phase
	at := time.Now()
	var n int
	require.NoError(h.t, h.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name ~ '^r[0-9]+\.[0-9]+$'`).Scan(&n))
	h.recordOutage("backends terminated", n, at)
}

// outage runs fault, which takes the server down and brings it back, and
// records it as an outage of kind.
func (h *chaosHarness) outage(kind string, fault func() error) {
	from := time.Now()
	require.NoError(h.t, fault())
	h.recordOutage(kind, 1, from)
}

// recordOutage records an outage from from until now, counted as n
// faults of kind.
func (h *chaosHarness) recordOutage(kind string, n int, from time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outages = append(h.outages, chaos.Outage{From: from, To: time.Now()})
	h.faults[kind] += n
}
