package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The recovery-budget tests: a dispatcher claims ahead of its handlers
// (up to Concurrency + Claimers × BatchSize events), so a worker that dies
// holds events whose handler never started. Recovery must return those
// without spending their poison budget (MaxRecoveries), and still fail an
// event that kills its worker every time it starts. The workers are child
// processes (this test binary run again, see startChild), SIGKILLed.
//
// How a child says that a handler started: the handler's first action is
// one write(2) of the line "started <event id>\n" to the child's stdout (an
// unbuffered *os.File; a line this short is written atomically into the
// pipe), before it does anything else. The kernel keeps what was written
// when the child is killed, so the parent, which reads every line until
// EOF, knows every handler call that started in every child.

// The crash child's role and what it needs, besides envChildURL and
// envChildSchema.
const (
	roleCrash     = "crash-dispatch"
	envCrashMode  = "PGOUTBOX_IT_CRASH_MODE"  // crashBlock or crashPoison
	envCrashOwner = "PGOUTBOX_IT_CRASH_OWNER" // the child dispatcher's Owner

	// crashBlock: every handler blocks until the parent kills the child.
	crashBlock = "block"
	// crashPoison: the poison event's handler SIGKILLs its own process;
	// the others take crashWork and succeed.
	crashPoison = "poison"

	crashEventType = "crash.test"
	crashStarted   = "started" // the line "started <event id>"

	crashLease         = time.Second
	crashPoll          = 50 * time.Millisecond
	crashMaxRecoveries = 3 // the default, set explicitly to assert on it
	crashWork          = 50 * time.Millisecond
)

func init() { runChildRole(roleCrash, childCrash) }

// crashPayload is the payload of the events of these tests.
type crashPayload struct {
	N      int  `json:"n"`
	Poison bool `json:"poison,omitempty"`
}

// TestCrashLoopSpendsNoBudgetOnUnstartedEvents: one dispatcher (Concurrency
// 1, BatchSize 10) claims all 10 events and starts one handler, which
// blocks; the process is SIGKILLed, and this happens to 4 processes in a
// row, each recovering the expired leases of the one before. A healthy
// dispatcher then drains the table. Only the events whose handler was
// running at a kill may have spent recovery budget: one killed 4 times
// (MaxRecoveries+1) is FAILED worker_lost, every other event is SENT with
// recoveries equal to the number of kills that interrupted its handler,
// which is 0 for the events that were only claimed ahead.
func TestCrashLoopSpendsNoBudgetOnUnstartedEvents(t *testing.T) {
	t.Parallel()
	const events, kills = 10, crashMaxRecoveries + 1
	ctx := testctx.New(t)
	db := pgtest.NewMigrated(t)
	ids := emitCrashEvents(t, ctx, db, events, -1)

	starts := map[uuid.UUID]int{}
	claimedAhead := 0 // kills that left claimed events whose handler never started
	for k := 1; k <= kills; k++ {
		owner := fmt.Sprintf("crash-child-%d", k)
		c := startChild(t, db, roleCrash, envCrashMode+"="+crashBlock, envCrashOwner+"="+owner)
		lines := childLines(c)
		var started uuid.UUID
		for started == uuid.Nil {
			select {
			case line, ok := <-lines:
				require.True(t, ok, "child %d ended before a handler started: %s", k, c.stderr)
				started = recordStart(t, starts, line)
			case <-ctx.Done():
				require.FailNow(t, "no handler started", "child %d: %s", k, c.stderr)
			}
		}
		require.NoError(t, c.cmd.Process.Kill()) // SIGKILL
		for line := range lines {                // a start written before the kill still counts
			recordStart(t, starts, line)
		}
		requireKilled(t, c.cmd.Wait(), c)

		var held int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING' AND lock_owner = $1`,
			owner).Scan(&held)
		require.NoError(t, err)
		t.Logf("child %d: handler of %s started, killed holding %d events", k, started, held)
		if held > 1 {
			claimedAhead++
		}
	}
	require.Positive(t, claimedAhead, "no child held an event it had not started: the scenario did not happen")

	drainCrashEvents(t, ctx, db)
	checkCrashOutcomes(t, ctx, db, ids, starts, func(id uuid.UUID) int { return starts[id] })
}

// TestPoisonEventKillsWorkerOthersDelivered: one poison event among 21
// kills its dispatcher process (SIGKILL) every time its handler starts.
// Each child (Concurrency 1, BatchSize 10) holds the poison's batch and a
// batch claimed ahead, so events of both are claimed and not started when
// the poison kills. Child dispatchers are started one after the other until
// recovery makes the poison FAILED worker_lost, which must happen after
// MaxRecoveries+1 starts; then a healthy dispatcher drains the table.
// Every other event must end SENT without having spent recovery budget:
// the children run one handler at a time and the poison waits for the
// outcomes of the handlers before it to be written, so at every kill each
// other event is either SENT or claimed and never started.
func TestPoisonEventKillsWorkerOthersDelivered(t *testing.T) {
	t.Parallel()
	const events, poisonAt, maxChildren = 21, 5, 10
	ctx := testctx.New(t)
	db := pgtest.NewMigrated(t)
	ids := emitCrashEvents(t, ctx, db, events, poisonAt)
	poison := ids[poisonAt]

	poisonFailed := func() bool {
		status, err := testdb.StatusOf(ctx, db.Pool, db.Table(), poison)
		require.NoError(t, err)
		return status == string(outbox.StatusFailed)
	}
	starts := map[uuid.UUID]int{}
	claimedAhead := 0 // kills that left claimed events whose handler never started
	for k := 1; ; k++ {
		require.LessOrEqual(t, k, maxChildren, "the poison event is not FAILED after %d child processes", maxChildren)
		owner := fmt.Sprintf("crash-child-%d", k)
		c := startChild(t, db, roleCrash, envCrashMode+"="+crashPoison, envCrashOwner+"="+owner)
		lines := childLines(c)
		tick := time.NewTicker(20 * time.Millisecond)
		stopping := false
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				recordStart(t, starts, line)
			case <-tick.C:
				// Once a child's recovery has made the poison FAILED,
				// that child stops cleanly: its stop releases what it
				// has not started, spending no budget.
				if !stopping && poisonFailed() {
					stopping = true
					require.NoError(t, c.stdin.Close())
				}
			case <-ctx.Done():
				require.FailNow(t, "timed out", "child %d: %s", k, c.stderr)
			}
		}
		tick.Stop()
		err := c.cmd.Wait()
		if stopping {
			require.NoError(t, err, "child %d did not stop cleanly: %s", k, c.stderr)
			t.Logf("child %d: found the poison FAILED, stopped", k)
			break
		}
		requireKilled(t, err, c)
		var held int
		err = db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING' AND lock_owner = $1 AND id <> $2`,
			owner, poison).Scan(&held)
		require.NoError(t, err)
		t.Logf("child %d: killed by the poison, holding %d other events", k, held)
		if held > 0 {
			claimedAhead++
		}
	}
	require.Positive(t, claimedAhead, "no child held an event it had not started: the scenario did not happen")
	require.Equal(t, crashMaxRecoveries+1, starts[poison],
		"the poison's handler should start MaxRecoveries+1 times before it is FAILED")

	drainCrashEvents(t, ctx, db)
	checkCrashOutcomes(t, ctx, db, ids, starts, func(id uuid.UUID) int {
		if id == poison {
			return starts[id]
		}
		return 0 // never running at a kill: SENT or not started
	})
}

// emitCrashEvents emits n events of crashEventType in one transaction,
// the poisonAt-th (from 0; -1 for none) marked poison, and returns their
// IDs in emit order.
func emitCrashEvents(t *testing.T, ctx context.Context, db *pgtest.DB, n, poisonAt int) []uuid.UUID {
	t.Helper()
	em, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	events := make([]outbox.Event, n)
	for i := range events {
		payload, err := json.Marshal(crashPayload{N: i, Poison: i == poisonAt})
		require.NoError(t, err)
		events[i] = outbox.Event{Type: crashEventType, ContentType: outbox.ContentTypeJSON, Payload: payload}
	}
	var ids []uuid.UUID
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		ids, err = em.Emit(ctx, tx, events...)
		return err
	})
	require.NoError(t, err)
	require.Len(t, ids, n)
	return ids
}

// childLines reads c's stdout lines into the returned channel, closed at
// EOF (the child exited or was killed).
func childLines(c *childProcess) <-chan string {
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		for {
			line, err := c.stdout.ReadString('\n')
			if line = strings.TrimSpace(line); line != "" {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}

// recordStart counts a "started <id>" line and returns the id.
func recordStart(t *testing.T, starts map[uuid.UUID]int, line string) uuid.UUID {
	t.Helper()
	word, rest, _ := strings.Cut(line, " ")
	require.Equal(t, crashStarted, word, "unexpected line from a child: %q", line)
	id, err := uuid.Parse(rest)
	require.NoError(t, err, "line %q", line)
	starts[id]++
	return id
}

// requireKilled checks that the child ended by SIGKILL, not by an error of
// its own.
func requireKilled(t *testing.T, waitErr error, c *childProcess) {
	t.Helper()
	var exit *exec.ExitError
	require.ErrorAs(t, waitErr, &exit, "child: %s", c.stderr)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL,
		"the child was not SIGKILLed: %v; stderr: %s", waitErr, c.stderr)
}

// drainCrashEvents runs a healthy dispatcher in this process, with a
// handler that succeeds at once, until no event is PENDING or PROCESSING:
// it recovers the last child's expired leases and delivers what is left.
func drainCrashEvents(t *testing.T, ctx context.Context, db *pgtest.DB) {
	t.Helper()
	d, err := dispatcher.New(db.Pool, dispatcher.Config{
		Table:         db.Table(),
		Owner:         "healthy",
		LeaseDuration: 5 * time.Second,
		PollInterval:  crashPoll,
		RecoverEvery:  1,
		MaxRecoveries: crashMaxRecoveries,
		Wakeup:        dispatcher.WakeupDisabled,
		Logger:        quietLogger(),
	})
	require.NoError(t, err)
	require.NoError(t, d.Handle(crashEventType, func(context.Context, outbox.Event) error { return nil }))
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	waitFor(t, ctx, "the healthy dispatcher to drain the table", func() (bool, string) {
		var open int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status IN ('PENDING', 'PROCESSING')`).Scan(&open)
		require.NoError(t, err)
		return open == 0, fmt.Sprintf("%d PENDING or PROCESSING", open)
	})
	require.NoError(t, d.Stop(ctx))
	require.NoError(t, <-runErr)
}

// checkCrashOutcomes checks every event's final row against the recovery
// contract. killed(id) is how many kills interrupted the event's running
// handler. Only those may have spent budget: with more than MaxRecoveries
// the event is FAILED worker_lost with recoveries = MaxRecoveries+1, else
// SENT with recoveries = killed(id), so 0 for an event that was only
// claimed ahead. It logs the table of every event and fails with it when
// any row breaks the contract, or an event is missing.
func checkCrashOutcomes(t *testing.T, ctx context.Context, db *pgtest.DB, ids []uuid.UUID,
	starts map[uuid.UUID]int, killed func(uuid.UUID) int,
) {
	t.Helper()
	type row struct {
		seq                  int64
		id                   uuid.UUID
		status, code         string
		recoveries, attempts int
	}
	rows, err := db.Pool.Query(ctx, `SELECT seq, id, status, coalesce(last_error_code, ''), recoveries, attempts
		FROM `+testdb.AllRows(db.Table())+` AS e ORDER BY seq`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.seq, &x.id, &x.status, &x.code, &x.recoveries, &x.attempts)
		return x, err
	})
	require.NoError(t, err)

	var table strings.Builder
	fmt.Fprintf(&table, "%-4s %-36s %-6s %-6s %-10s %-11s %-8s %-15s %s\n",
		"seq", "id", "starts", "killed", "status", "recoveries", "attempts", "last_error_code", "problem")
	bad := 0
	seen := map[uuid.UUID]bool{}
	for _, r := range got {
		seen[r.id] = true
		k := killed(r.id)
		want, wantRec, wantCode := string(outbox.StatusSent), k, ""
		if k > crashMaxRecoveries {
			want, wantRec, wantCode = string(outbox.StatusFailed), crashMaxRecoveries+1, string(outbox.CodeWorkerLost)
		}
		var problems []string
		if r.status != want {
			problems = append(problems, "want "+want)
		}
		if r.recoveries != wantRec {
			problems = append(problems, fmt.Sprintf("want recoveries %d", wantRec))
		}
		if wantCode != "" && r.code != wantCode {
			problems = append(problems, "want code "+wantCode)
		}
		if starts[r.id] == 0 && r.recoveries > 0 {
			problems = append(problems, "handler never started")
		}
		if len(problems) > 0 {
			bad++
		}
		fmt.Fprintf(&table, "%-4d %-36s %-6d %-6d %-10s %-11d %-8d %-15s %s\n",
			r.seq, r.id, starts[r.id], k, r.status, r.recoveries, r.attempts, r.code, strings.Join(problems, "; "))
	}
	for _, id := range ids {
		if !seen[id] {
			bad++
			fmt.Fprintf(&table, "%-4s %-36s lost: no row\n", "-", id)
		}
	}
	const legend = "starts: handler calls begun in the children; killed: kills that interrupted one"
	if bad > 0 {
		t.Errorf("%d of %d events break the recovery contract (%s):\n%s", bad, len(ids), legend, table.String())
		return
	}
	t.Logf("events after the crashes (%s):\n%s", legend, table.String())
}

// childCrash is the crash child: one dispatcher (Concurrency 1) whose
// handlers behave as envCrashMode says, until it is killed or its stdin
// closes (then it stops cleanly).
func childCrash() error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(envChildURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	table := outbox.Table{Schema: os.Getenv(envChildSchema)}
	cfg := dispatcher.Config{
		Table:         table,
		Owner:         os.Getenv(envCrashOwner),
		Concurrency:   1,
		LeaseDuration: crashLease,
		PollInterval:  crashPoll,
		RecoverEvery:  1,
		MaxRecoveries: crashMaxRecoveries,
		Wakeup:        dispatcher.WakeupDisabled,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	var h outbox.Handler
	switch mode := os.Getenv(envCrashMode); mode {
	case crashBlock:
		cfg.BatchSize = 10
		h = func(_ context.Context, e outbox.Event) error {
			sayStarted(e.ID)
			select {} // until killed
		}
	case crashPoison:
		// Concurrency 1 + Claimers 2 × 10 = 21: the batch holding the
		// poison and one claimed ahead of it, whose events wait for the
		// handler slot behind the first batch's.
		cfg.BatchSize = 10
		p := &poisonHandler{pool: pool, table: pgx.Identifier{table.Schema, outbox.DefaultTable}.Sanitize()}
		h = p.handle
	default:
		return fmt.Errorf("unknown %s %q", envCrashMode, mode)
	}
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		return err
	}
	if err := d.Handle(crashEventType, h); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop() // stdin closed: stop cleanly
	}()
	fmt.Println(childReady)
	return d.Run(runCtx)
}

// sayStarted writes "started <id>\n" to stdout in one write(2), which
// survives the process being killed right after.
func sayStarted(id uuid.UUID) {
	_, _ = os.Stdout.WriteString(crashStarted + " " + id.String() + "\n")
}

// poisonHandler is the handler of crashPoison.
type poisonHandler struct {
	pool     *pgxpool.Pool
	table    string // quoted
	mu       sync.Mutex
	returned []uuid.UUID // events whose handler returned in this process
}

// handle says it started; a poison event then SIGKILLs the process, any
// other event takes crashWork and succeeds. Before the kill, the poison
// waits (a few milliseconds, and not at all when it is the first handler
// of its process) until the outcomes of the handlers that returned before
// it are written: with Concurrency 1 nothing else runs, so at the kill
// every other event is SENT or claimed and never started, and none of them
// may spend recovery budget. (With more concurrency, events running beside
// the poison at each kill would spend budget as the contract allows, and
// could end FAILED by chance.)
func (p *poisonHandler) handle(_ context.Context, e outbox.Event) error {
	sayStarted(e.ID)
	var body crashPayload
	if err := json.Unmarshal(e.Payload, &body); err != nil {
		return outbox.Permanent(err)
	}
	if !body.Poison {
		time.Sleep(crashWork)
		p.mu.Lock()
		p.returned = append(p.returned, e.ID)
		p.mu.Unlock()
		return nil
	}
	if err := p.awaitOutcomes(); err != nil {
		fmt.Fprintln(os.Stderr, "child: poison: earlier outcomes not written, killing anyway:", err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// awaitOutcomes waits up to 5s until no event whose handler returned in
// this process is PROCESSING any more. With none, it returns at once: the
// poison then kills its process without a round trip.
func (p *poisonHandler) awaitOutcomes() error {
	p.mu.Lock()
	ids := append([]uuid.UUID(nil), p.returned...)
	p.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		var open int
		err := p.pool.QueryRow(ctx, `SELECT count(*) FROM `+p.table+` WHERE id = ANY($1) AND status = 'PROCESSING'`, ids).Scan(&open)
		if err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
