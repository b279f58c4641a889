package pgoutboxtest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeTB records the failures of a helper under test. Like testing.T's,
// its Fatalf ends the goroutine that calls it.
type fakeTB struct {
	mu       sync.Mutex
	failures []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

// runFake runs f with a fakeTB on a goroutine of its own, so that Fatalf
// ends f alone, and returns the failures f reported.
func runFake(f func(tb pgoutboxtest.TB)) []string {
	tb := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failures
}

// requireFails runs f with a fakeTB, requires that it failed exactly once
// and returns the message.
func requireFails(t *testing.T, f func(tb pgoutboxtest.TB)) string {
	t.Helper()
	failures := runFake(f)
	require.Len(t, failures, 1, "the helper must fail once")
	return failures[0]
}

// testBundle is one test's schema with a migrated outbox table and an
// emitter on it.
type testBundle struct {
	db      *testdb.DB
	table   outbox.Table
	emitter *emitter.Emitter
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := testdb.NewMigrated(t)
	e, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	return &testBundle{db: db, table: db.Table(), emitter: e}
}

// emit commits events in one transaction and returns their IDs.
func (b *testBundle) emit(t *testing.T, events ...outbox.Event) []outbox.Event {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ids, err := b.emitter.Emit(ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	out := make([]outbox.Event, len(events))
	for i, e := range events {
		e.ID = ids[i]
		out[i] = e
	}
	return out
}

// begin starts a transaction rolled back when the test ends.
func (b *testBundle) begin(t *testing.T) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}

// jsonEvent is an event of the given type and aggregate ID with a JSON
// payload.
func jsonEvent(eventType, aggregateID, payload string) outbox.Event {
	return outbox.Event{
		Type: eventType, AggregateType: "order", AggregateID: aggregateID,
		ContentType: outbox.ContentTypeJSON, Payload: []byte(payload),
	}
}

// exampleSetup gives an example a schema with a migrated outbox table and
// an orders table, as a test's own set-up would.
func exampleSetup() (*testdb.ExampleTB, *pgxpool.Pool, outbox.Table) {
	t := &testdb.ExampleTB{}
	db := testdb.NewMigrated(t)
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		t.Done()
		panic(err)
	}
	return t, db.Pool, db.Table()
}
