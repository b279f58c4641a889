package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The end-to-end tests: events emitted in business transactions by several
// writers go through a dispatcher and a broker publisher to a consumer.
// The first dispatcher runs in a child process and is SIGKILLed mid-batch;
// a second one, in the test process, recovers its leases and re-publishes.

// The child dispatcher's role and what it needs, besides envChildURL and
// envChildSchema.
const (
	roleDispatch    = "e2e-dispatch"
	envChildBroker  = "PGOUTBOX_IT_BROKER" // "nats" or "kafka"
	envChildAddr    = "PGOUTBOX_IT_BROKER_ADDR"
	envChildPrefix  = "PGOUTBOX_IT_DEST_PREFIX" // subject or topic prefix
	envChildAppName = "PGOUTBOX_IT_APP_NAME"    // its connections' application_name
	e2eEventType    = "order.created"
	e2eWriters      = 4
	e2eEventsPerTx  = 10
	e2eChildLease   = 2 * time.Second
	e2eChildConcurr = 400
)

// The child role is started here rather than from childMain, which belongs
// to the migrate test: init runs before TestMain.
func init() { runChildRole(roleDispatch, childDispatch) }

// runChildRole, when this process is a child of the given role, runs it and
// exits: 0 when run returns nil, else 1 after printing the error to stderr.
// Otherwise it returns at once. Call it from an init function.
func runChildRole(role string, run func() error) {
	if os.Getenv(envChildRole) != role {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// e2eBroker is what the scenario needs from one broker.
type e2eBroker struct {
	// Kind and Addr tell newPublisher (in both processes) what to build.
	Kind, Addr string
	// Prefix is the subject or topic prefix of this test's messages.
	Prefix string
	// Stored returns how many messages the broker holds for the test.
	Stored func(ctx context.Context) (int, error)
	// ExactlyOnce says the broker deduplicates re-publishes (NATS).
	ExactlyOnce bool
}

// newPublisher builds the broker's publisher; close releases its client.
func newPublisher(kind, addr, prefix string) (p outbox.Publisher, closeFunc func(), err error) {
	switch kind {
	case "nats":
		return newNATSPublisher(addr, prefix)
	case "kafka":
		return newKafkaPublisher(addr, prefix)
	default:
		return nil, nil, fmt.Errorf("unknown broker %q", kind)
	}
}

// tally counts the deliveries of every event ID the consumer sees.
type tally struct {
	mu     sync.Mutex
	counts map[uuid.UUID]int
	total  int
}

func newTally() *tally { return &tally{counts: map[uuid.UUID]int{}} }

func (t *tally) add(id uuid.UUID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[id]++
	t.total++
}

// snapshot returns the deliveries so far and their total.
func (t *tally) snapshot() (map[uuid.UUID]int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.counts), t.total
}

func (t *tally) sum() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// e2eResult is what the scenario saw, for the broker-specific checks.
type e2eResult struct {
	Emitted []uuid.UUID
	Counts  map[uuid.UUID]int
	Total   int
	// Republished counts events the broker held before the kill whose
	// rows the dead dispatcher left PROCESSING: the second replica
	// published them again.
	Republished int
}

// runKillScenario emits n events from e2eWriters writers while a child
// process dispatches them to b, SIGKILLs the child once the consumer
// (which feeds got) has seen n/5 messages, lets a second
// dispatcher in this process recover and finish, and checks completeness
// and the final row states. The broker-specific duplicate checks are the
// caller's.
func runKillScenario(t *testing.T, db *pgtest.DB, b e2eBroker, got *tally, n int) e2eResult {
	t.Helper()
	// Ends at return, as the dispatchers this starts must.
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	start := time.Now()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id uuid PRIMARY KEY, writer int NOT NULL)`)
	require.NoError(t, err)

	appName := "pgoutbox-e2e-" + db.Schema
	child := startChildDispatcher(t, db, b, appName)

	// Writers: each transaction inserts e2eEventsPerTx orders and emits
	// their events.
	var writers errgroup.Group
	emitted := make([][]uuid.UUID, e2eWriters)
	writerPool := db.NewPool(t, e2eWriters)
	for w := range e2eWriters {
		writers.Go(func() error {
			ids, err := writeOrders(ctx, writerPool, db.Table(), w, n/e2eWriters)
			emitted[w] = ids
			return err
		})
	}

	// Once the consumer has seen a fifth of the events (2,000 of 10,000),
	// freeze the child: the next batch the broker acknowledges is held
	// there, before its outcome is written. Then kill it: mid-batch, with
	// events in the broker that the outbox still has as PROCESSING.
	waitFor(t, ctx, "the consumer to see messages from the child", func() (bool, string) {
		s := got.sum()
		return s >= n/5, fmt.Sprintf("%d received; child: %s", s, child.stderr)
	})
	_, err = io.WriteString(child.stdin, childFreeze+"\n")
	require.NoError(t, err)
	frozen := make(chan string, 1)
	go func() { line, _ := child.stdout.ReadString('\n'); frozen <- strings.TrimSpace(line) }()
	select {
	case line := <-frozen:
		require.Equal(t, childFrozen, line, "child: %s", child.stderr)
	case <-ctx.Done():
		require.FailNow(t, "the child did not freeze", "child: %s", child.stderr)
	}
	require.NoError(t, child.cmd.Process.Kill()) // SIGKILL
	_ = child.cmd.Wait()
	killedAt := time.Since(start)

	// Its connections close once each backend notices; only then is the
	// PROCESSING set final (a completion already sent may still commit).
	waitFor(t, ctx, "the killed child's backends to exit", func() (bool, string) {
		var left int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&left)
		require.NoError(t, err)
		return left == 0, fmt.Sprintf("%d backends", left)
	})
	rows, err := db.Pool.Query(ctx, `SELECT id FROM outbox_events WHERE status = 'PROCESSING'`)
	require.NoError(t, err)
	inFlight, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.NotEmpty(t, inFlight, "the child was not killed mid-batch: it held no event")

	// What the broker holds now (the child is dead) is what it received
	// from the child; wait for the consumer to have read all of it.
	var beforeB map[uuid.UUID]int
	waitFor(t, ctx, "the consumer to catch up with the broker", func() (bool, string) {
		stored, err := b.Stored(ctx)
		require.NoError(t, err)
		var total int
		beforeB, total = got.snapshot()
		return total >= stored, fmt.Sprintf("%d received of %d stored", total, stored)
	})
	republished := 0
	for _, id := range inFlight {
		if beforeB[id] > 0 {
			republished++
		}
	}
	require.Positive(t, republished, "no event was published but not yet SENT when the child died")

	// The second replica recovers at every poll (50ms), so it takes over
	// the dead one's leases as soon as they expire (e2eChildLease).
	pub, closePub, err := newPublisher(b.Kind, b.Addr, b.Prefix)
	require.NoError(t, err)
	defer closePub()
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Table:         db.Table(),
		Owner:         "replica-b",
		Publisher:     pub,
		LeaseDuration: 5 * time.Second,
		RecoverEvery:  1,
		PollInterval:  50 * time.Millisecond,
		Logger:        quietLogger(),
	})
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()

	require.NoError(t, writers.Wait())
	var all []uuid.UUID
	for _, ids := range emitted {
		all = append(all, ids...)
	}
	require.Len(t, all, n)
	emittedAt := time.Since(start)

	waitFor(t, ctx, "every event to arrive and be SENT", func() (bool, string) {
		counts, _ := got.snapshot()
		missing := 0
		for _, id := range all {
			if counts[id] == 0 {
				missing++
			}
		}
		var notSent int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+testdb.AllRows(db.Table())+` AS e WHERE status <> 'SENT'`).Scan(&notSent)
		require.NoError(t, err)
		return missing == 0 && notSent == 0, fmt.Sprintf("%d missing, %d not SENT", missing, notSent)
	})
	require.NoError(t, d.Stop(ctx))
	require.NoError(t, <-runErr)

	// Every row SENT; every lease the dead child held recovered by B.
	var sent, recovered int
	err = db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'SENT'),
		count(*) FILTER (WHERE id = ANY($1) AND recoveries > 0) FROM `+testdb.AllRows(db.Table())+` AS e`, inFlight).Scan(&sent, &recovered)
	require.NoError(t, err)
	require.Equal(t, n, sent)
	require.Equal(t, len(inFlight), recovered)
	st := d.Stats()
	require.GreaterOrEqual(t, st.Recovered, uint64(len(inFlight)))

	counts, total := got.snapshot()
	for _, id := range all {
		require.Positive(t, counts[id], "event %s never arrived", id)
	}
	require.Len(t, counts, n, "the consumer saw IDs that were not emitted")
	t.Logf("%s: %d events from %d writers; child killed at %s; the broker then held %d; the child held %d events PROCESSING, %d of them already in the broker; "+
		"replica B recovered %d, sent %d, retried %d; all emitted at %s, all arrived at %s; %d deliveries",
		b.Kind, n, e2eWriters, killedAt.Round(time.Millisecond), len(beforeB), len(inFlight), republished,
		st.Recovered, st.Sent, st.Retried, emittedAt.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), total)
	return e2eResult{Emitted: all, Counts: counts, Total: total, Republished: republished}
}

// writeOrders commits count orders in transactions of e2eEventsPerTx, each
// inserting its orders and emitting one event per order, and returns the
// event IDs.
func writeOrders(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, writer, count int) ([]uuid.UUID, error) {
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		return nil, err
	}
	var all []uuid.UUID
	for done := 0; done < count; done += e2eEventsPerTx {
		size := min(e2eEventsPerTx, count-done)
		orders := make([]uuid.UUID, size)
		events := make([]outbox.Event, size)
		for i := range orders {
			orders[i] = uuid.New()
			events[i] = outbox.Event{
				Type: e2eEventType, AggregateType: "order", AggregateID: orders[i].String(),
				ContentType: outbox.ContentTypeJSON, Payload: fmt.Appendf(nil, `{"order":%q,"writer":%d}`, orders[i], writer),
			}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, writer) SELECT unnest($1::uuid[]), $2`, orders, writer); err != nil {
				return err
			}
			ids, err := em.Emit(ctx, tx, events...)
			all = append(all, ids...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}

// childProcess is a running child dispatcher and its pipes.
type childProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *testdb.LogBuffer
}

// startChildDispatcher re-executes the test binary as a dispatcher of db's
// outbox publishing to b, and returns once it is about to run.
func startChildDispatcher(t *testing.T, db *pgtest.DB, b e2eBroker, appName string) *childProcess {
	t.Helper()
	return startChild(t, db, roleDispatch,
		envChildBroker+"="+b.Kind,
		envChildAddr+"="+b.Addr,
		envChildPrefix+"="+b.Prefix,
		envChildAppName+"="+appName,
	)
}

// startChild re-executes the test binary as a child of the given role on
// db's schema, with the extra environment variables env ("NAME=value"), and
// returns once the child said childReady. The test's end closes its stdin
// and kills it.
func startChild(t *testing.T, db *pgtest.DB, role string, env ...string) *childProcess {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChildRole+"="+role,
		envChildURL+"="+db.URL,
		envChildSchema+"="+db.Schema,
	)
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe() // closed by the test's end: the child then exits
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &testdb.LogBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &childProcess{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: stderr}
	line, err := c.stdout.ReadString('\n')
	require.NoError(t, err, "child: %s", stderr)
	require.Equal(t, childReady, strings.TrimSpace(line))
	return c
}

// childDispatch is the child process: one dispatcher publishing to the
// broker the environment names, until it is killed or its stdin closes.
// A childFreeze line on stdin makes its publisher hold every batch the
// broker acknowledges from then on, before the outcome is written, and say
// childFrozen: the test then kills it inside the window where a crash
// makes the outbox publish again.
func childDispatch() error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(envChildURL))
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = os.Getenv(envChildAppName)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pub, closePub, err := newPublisher(os.Getenv(envChildBroker), os.Getenv(envChildAddr), os.Getenv(envChildPrefix))
	if err != nil {
		return err
	}
	defer closePub()
	fp := &freezingPublisher{Publisher: pub, frozen: make(chan struct{})}
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:         outbox.Table{Schema: os.Getenv(envChildSchema)},
		Owner:         "replica-a",
		Publisher:     fp,
		LeaseDuration: e2eChildLease,
		Concurrency:   e2eChildConcurr,
		PollInterval:  50 * time.Millisecond,
		Logger:        quietLogger(),
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if in.Text() == childFreeze {
				fp.freeze.Do(func() { close(fp.frozen) })
			}
		}
		stop() // stdin closed: the parent is gone
	}()
	fmt.Println(childReady)
	return d.Run(runCtx)
}

// The lines of the freeze handshake between the test and its child.
const (
	childFreeze = "freeze"
	childFrozen = "frozen"
)

// freezingPublisher publishes normally until frozen is closed; from then
// on, every batch whose Publish the broker has answered is held there,
// never returned, once the first of them has said childFrozen.
type freezingPublisher struct {
	outbox.Publisher
	freeze sync.Once
	frozen chan struct{}
	said   sync.Once
}

func (p *freezingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := p.Publisher.Publish(ctx, msgs)
	select {
	case <-p.frozen:
		if errors.Join(errs...) == nil { // the broker holds the whole batch
			p.said.Do(func() { fmt.Println(childFrozen) })
		}
		<-ctx.Done() // until killed (long before PublishTimeout)
	default:
	}
	return errs
}

// waitFor polls cond every 10ms until it holds, failing the test with
// cond's last progress note when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, note := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "timed out waiting for "+what, note)
		case <-tick.C:
		}
	}
}

// quietLogger discards logs.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// e2eEvents is the number of events per scenario: 10,000, or 1,000 with
// -short.
func e2eEvents() int {
	if testing.Short() {
		return 1000
	}
	return 10000
}
