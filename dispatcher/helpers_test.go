package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// insertEvents commits n events of the given type and returns their IDs.
func insertEvents(t *testing.T, db *testdb.DB, eventType string, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	_, err := db.Pool.Exec(context.Background(),
		`INSERT INTO outbox_events (id, event_type, payload) SELECT id, $2, '\x7b7d' FROM unnest($1::uuid[]) AS id`,
		ids, eventType)
	require.NoError(t, err)
	return ids
}

// outcomeLog records what OnOutcome receives.
type outcomeLog struct {
	mu       sync.Mutex
	outcomes []dispatcher.Outcome
}

func (l *outcomeLog) add(_ context.Context, o dispatcher.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcomes = append(l.outcomes, o)
}

// of returns the outcomes recorded so far for the event id.
func (l *outcomeLog) of(id uuid.UUID) []dispatcher.Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []dispatcher.Outcome
	for _, o := range l.outcomes {
		if o.Event.ID == id {
			out = append(out, o)
		}
	}
	return out
}

// wait waits until n outcomes of id were recorded and returns them.
func (l *outcomeLog) wait(t *testing.T, id uuid.UUID, n int) []dispatcher.Outcome {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d outcomes of %s", n, id), func() bool { return len(l.of(id)) >= n })
	return l.of(id)
}

// quietLogger discards logs.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// baseConfig is a fast configuration for tests on db's outbox.
func baseConfig(db *testdb.DB) dispatcher.Config {
	return dispatcher.Config{
		Table:        db.Table(),
		PollInterval: 20 * time.Millisecond,
		Logger:       quietLogger(),
		Backoff:      outbox.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, NoJitter: true},
	}
}

// runDispatcher starts d and stops it when the test ends, requiring a
// clean stop.
func runDispatcher(t *testing.T, d *dispatcher.Dispatcher) {
	t.Helper()
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := testctx.ForCleanup(t)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
		require.NoError(t, d.Err())
	})
}

// statusCounts returns how many events are in each status, wherever they
// are: the outbox table, its dead letters and its SENT history.
func statusCounts(t *testing.T, db *testdb.DB) map[outbox.Status]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT status, count(*) FROM `+testdb.AllRows(db.Table())+` AS e GROUP BY status`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[outbox.Status]int{}
	for rows.Next() {
		var s outbox.Status
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// waitFor polls cond (which may query the database) until it holds,
// for as long as the run's -timeout allows (testctx.Await): never a fixed
// cap, which a loaded machine can reach before cond could hold.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testctx.Await(t, what, cond)
}

// row is the delivery state of one event.
type row struct {
	Status     outbox.Status
	Attempts   int
	Recoveries int
	Snoozes    int
	Code       string
}

// readRow reads the event id wherever it is (testdb.AllRows); it fails
// the test when the event is nowhere.
func readRow(t *testing.T, db *testdb.DB, id uuid.UUID) row {
	t.Helper()
	var r row
	err := db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts, recoveries, snoozes, coalesce(last_error_code, '') FROM `+testdb.AllRows(db.Table())+` AS e
		WHERE id = $1 ORDER BY place = 'T' DESC LIMIT 1`, id).
		Scan(&r.Status, &r.Attempts, &r.Recoveries, &r.Snoozes, &r.Code)
	require.NoError(t, err)
	return r
}

// callLog records handler calls per event and detects overlapping calls.
type callLog struct {
	mu      sync.Mutex
	calls   map[uuid.UUID]int
	running map[uuid.UUID]bool
	overlap []string
}

func newCallLog() *callLog {
	return &callLog{calls: map[uuid.UUID]int{}, running: map[uuid.UUID]bool{}}
}

func (l *callLog) enter(id uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[id] {
		l.overlap = append(l.overlap, fmt.Sprint(id))
	}
	l.running[id] = true
	l.calls[id]++
}

func (l *callLog) exit(id uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, id)
}

func (l *callLog) count(id uuid.UUID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[id]
}

// killablePool is a pool that can be cut off from the database as if its
// process had died: no new connections, existing ones terminated.
type killablePool struct {
	*pgxpool.Pool
	app    string
	killed atomic.Bool
	// dialing, when set (before the pool's first dial), runs at the
	// start of each dial the kill has not refused yet.
	dialing func()
}

func newKillablePool(t *testing.T, db *testdb.DB) *killablePool {
	t.Helper()
	cfg := poolConfig(t, db)
	kp := &killablePool{app: "victim_" + uuid.NewString()[:8]}
	cfg.ConnConfig.RuntimeParams["application_name"] = kp.app
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if kp.killed.Load() {
			return errKilled{}
		}
		if kp.dialing != nil {
			kp.dialing()
		}
		return nil
	}
	// A dial that began before the kill and ends after it is refused
	// too: the kill's termination loop cannot see a connection that does
	// not exist yet, and one that slipped past it kept renewing a dead
	// victim's lease (a CI run's Stop then waited out DrainTimeout).
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error {
		if kp.killed.Load() {
			return errKilled{}
		}
		return nil
	}
	kp.Pool = openPool(t, cfg)
	return kp
}

// poolConfig is the configuration of a pool of 4 connections on db's
// schema, for a test to adjust before openPool.
func poolConfig(t *testing.T, db *testdb.DB) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	cfg.MaxConns = 4
	return cfg
}

// openPool opens a pool, closed when the test ends.
func openPool(t *testing.T, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// errKilled is a killed pool's refusal to connect. Like pgx's errors for a
// database that cannot be reached, it says that nothing was sent.
type errKilled struct{}

func (errKilled) Error() string     { return "killed" }
func (errKilled) SafeToRetry() bool { return true }

// kill cuts the pool off and terminates its server connections, until
// none has been seen for 100ms: a connection whose dial began before the
// cut may show up a little later (and is refused once its dial ends).
func (kp *killablePool) kill(t *testing.T, db *testdb.DB) {
	t.Helper()
	kp.killed.Store(true)
	for quiet := 0; quiet < 10; {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, kp.app).Scan(&n))
		if n > 0 {
			quiet = 0
		} else {
			quiet++
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expireLease makes the database lease of id pass now.
func expireLease(t *testing.T, db *testdb.DB, id uuid.UUID) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(),
		`UPDATE outbox_events SET lease_until = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

// lockOwner returns the lock_owner of a row.
func lockOwner(t *testing.T, db *testdb.DB, id uuid.UUID) string {
	t.Helper()
	var owner string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT CASE WHEN status = 'PROCESSING' THEN lock_owner ELSE '' END FROM `+testdb.AllRows(db.Table())+` AS e
		WHERE id = $1 ORDER BY place = 'T' DESC LIMIT 1`, id).Scan(&owner))
	return owner
}

// errorLog records what OnError receives.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// matching returns the errors recorded so far that match target.
func (l *errorLog) matching(target error) []error {
	return l.filter(func(err error) bool { return errors.Is(err, target) })
}

// filter returns the errors recorded so far for which keep is true.
func (l *errorLog) filter(keep func(error) bool) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for _, err := range l.errs {
		if keep(err) {
			out = append(out, err)
		}
	}
	return out
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

// count returns how many records at level have the attribute key = value.
func (r *logRecorder) count(level slog.Level, key, value string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level != level {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == key && a.Value.String() == value {
				n++
				return false
			}
			return true
		})
	}
	return n
}

// testClock is a local clock for dispatcher.SetClock that a test moves
// ahead by hand, as a paused process sees time jump when it resumes.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time           { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(by time.Duration) { c.offset.Add(int64(by)) }

// frozenClock returns a clock for dispatcher.SetClock that never moves: no local lease
// deadline passes, and only renewals and the database decide.
func frozenClock() func() time.Time {
	at := time.Now()
	return func() time.Time { return at }
}

// receive waits for a value on ch for as long as the run's -timeout
// allows (testctx.New), failing t with what it waited for if that ends
// first.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	ctx := testctx.New(t)
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("still waiting for %s: %v", what, context.Cause(ctx))
		panic("unreachable")
	}
}

// finishedGrants gives the role %[2]s what the dispatcher needs on the
// dead letters and the SENT history: it moves FAILED and sent events
// there and looks lost replies up there; its retention deletes old dead
// letters and old rows of the history's default partition.
const finishedGrants = `GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_events_dead TO %[2]s;
GRANT SELECT, INSERT ON outbox_events_sent TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events_sent_default TO %[2]s;
GRANT EXECUTE ON FUNCTION outbox_events_sent_add(timestamptz, timestamptz), outbox_events_sent_drop(timestamptz) TO %[2]s`

// newGrantedRole creates a role for the test and runs grants on db as
// its owner: in grants, %[1]s is the quoted schema, %[2]s the quoted
// role and %[3]s on the args. It returns the role and its quoted name.
func newGrantedRole(t *testing.T, db *testdb.DB, prefix, grants string, args ...any) (role, quoted string) {
	t.Helper()
	role = db.NewRole(t, prefix)
	quoted = pgx.Identifier{role}.Sanitize()
	_, err := db.Pool.Exec(context.Background(),
		fmt.Sprintf(grants, append([]any{pgx.Identifier{db.Schema}.Sanitize(), quoted}, args...)...))
	require.NoError(t, err)
	return role, quoted
}

// roleDispatcher is a dispatcher of baseConfig connecting as role, whose
// handler of type "x" succeeds.
func roleDispatcher(t *testing.T, db *testdb.DB, role string) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(db.RolePool(t, role, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	return d
}
