package emitter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Keep the events of one aggregate in the order of its changes: each
// writer locks the aggregate's row (SELECT … FOR UPDATE) before it reads,
// changes and emits. A second writer of the same order waits until the
// first commits, so its event is inserted (a higher seq) and committed
// after the first one's, and computed from the first one's result. Per-key
// ordering (dispatcher Ordering PerKey, order key = AggregateID here)
// then delivers them in that order. Without the lock both transactions
// could read the same total, and the later commit could carry the lower
// seq.
func ExampleEmitter_Emit_lockTheAggregate() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO orders (id, total_cents) VALUES ('o-1', 4200)`); err != nil {
		panic(err)
	}

	// change is the pattern: lock, read, write, emit, in one transaction.
	change := func(tx pgx.Tx, typ string, deltaCents int64) error {
		var total int64
		err := tx.QueryRow(ctx, `SELECT total_cents FROM orders WHERE id = $1 FOR UPDATE`, "o-1").Scan(&total)
		if err != nil {
			return err
		}
		total += deltaCents
		if _, err := tx.Exec(ctx, `UPDATE orders SET total_cents = $2 WHERE id = $1`, "o-1", total); err != nil {
			return err
		}
		e, err := outbox.NewJSON(typ, map[string]int64{"total_cents": total})
		if err != nil {
			return err
		}
		e.AggregateType, e.AggregateID = "order", "o-1"
		_, err = em.Emit(ctx, tx, e)
		return err
	}

	// The first writer takes the lock; a second one starts meanwhile.
	first, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	if err := change(first, "order.item_added", 1000); err != nil {
		panic(err)
	}
	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return change(tx, "order.discounted", -200) })
	}()
	waitUntilBlocked(ctx, pool, first) // the second writer waits for the row lock
	if err := first.Commit(ctx); err != nil {
		panic(err)
	}
	if err := <-second; err != nil {
		panic(err)
	}

	rows, err := pool.Query(ctx, `SELECT event_type, convert_from(payload, 'UTF8') FROM outbox_events ORDER BY seq`)
	if err != nil {
		panic(err)
	}
	var typ, payload string
	_, err = pgx.ForEachRow(rows, []any{&typ, &payload}, func() error {
		fmt.Println(typ, payload)
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// order.item_added {"total_cents":5200}
	// order.discounted {"total_cents":5000}
}

// waitUntilBlocked returns once another session waits for a lock that
// tx holds, looking from a connection of pool (only to make the example
// show the wait; applications do not need it).
func waitUntilBlocked(ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx) {
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		panic(err)
	}
	for {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`,
			pid).Scan(&waiting)
		if err != nil {
			panic(err)
		}
		if waiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
