package admin_test

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The dead letters, page by page, without their payloads.
func ExampleAdmin_List() {
	ctx := context.Background()
	pool, table, _, done := exampleDB() // the application's pool and outbox table
	defer done()

	a, err := admin.New(pool, admin.Config{Table: table})
	if err != nil {
		panic(err)
	}
	p := admin.ListParams{Status: outbox.StatusFailed, Limit: 100}
	for {
		page, err := a.List(ctx, p)
		if err != nil {
			panic(err)
		}
		for _, r := range page.Events {
			fmt.Println(r.Type, r.AggregateID, r.Status, r.Attempts, r.LastErrorCode)
		}
		if page.Next.IsZero() {
			break
		}
		p.After = page.Next
	}
	// Output:
	// invoice.issued i-1 FAILED 1 handler_error
	// invoice.issued i-2 FAILED 1 handler_error
}

// One event in full: its payload, headers and attempt log.
func ExampleAdmin_Inspect() {
	ctx := context.Background()
	pool, table, failed, done := exampleDB()
	defer done()
	a, err := admin.New(pool, admin.Config{Table: table})
	if err != nil {
		panic(err)
	}

	d, err := a.Inspect(ctx, failed[0])
	if err != nil {
		panic(err) // errors.Is(err, admin.ErrNotFound) for an unknown ID
	}
	fmt.Println(d.Type, d.Status, string(d.Payload))
	for _, l := range d.AttemptLog {
		fmt.Printf("attempt %d: %s, %s: %s\n", l.Attempt, l.Outcome, l.Code, l.Message)
	}
	// Output:
	// invoice.issued FAILED {"invoice_id":"i-1"}
	// attempt 1: failed, handler_error: billing service unavailable
}

// Once the billing service is back, its dead letters go back to PENDING,
// due now with a fresh retry budget, and the dispatchers are woken. A dry
// run first says what the replay would change.
func ExampleAdmin_Replay() {
	ctx := context.Background()
	pool, table, _, done := exampleDB()
	defer done()
	a, err := admin.New(pool, admin.Config{Table: table})
	if err != nil {
		panic(err)
	}

	p := admin.ReplayParams{Type: "invoice.issued", Code: outbox.CodeHandlerError, DryRun: true}
	res, err := a.Replay(ctx, p)
	if err != nil {
		panic(err)
	}
	fmt.Println("would replay:", len(res.Replayed))

	p.DryRun = false
	if res, err = a.Replay(ctx, p); err != nil {
		panic(err)
	}
	fmt.Println("replayed:", len(res.Replayed))

	c, err := a.Counts(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("pending:", c.Pending, "sent:", c.Sent, "failed:", c.Failed)
	// Output:
	// would replay: 2
	// replayed: 2
	// pending: 2 sent: 1 failed: 0
}
