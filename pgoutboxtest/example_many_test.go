package pgoutboxtest_test

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

// A test that placing two orders emits their events in order, and no
// other event.
func ExampleRequireManyEmitted() {
	ctx := context.Background()
	t, pool, table := exampleSetup()
	defer t.Done()
	em, err := emitter.New(emitter.Config{Table: table})
	if err != nil {
		panic(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // the test leaves nothing behind
	for _, id := range []string{"41", "42"} {
		if err := (orders{emitter: em}).place(ctx, tx, id); err != nil {
			panic(err)
		}
	}
	events := pgoutboxtest.RequireManyEmitted(ctx, t, tx, table,
		pgoutboxtest.Want{Type: "order.placed", AggregateID: "41"},
		pgoutboxtest.Want{Type: "order.placed", AggregateID: "42"},
	)
	pgoutboxtest.RequireNotEmitted(ctx, t, tx, table, pgoutboxtest.Want{Type: "order.cancelled"})
	fmt.Println(len(events), "events")
	// Output:
	// 2 events
}
