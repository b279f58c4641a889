package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A dispatcher with a handler for one event type and a hook that sees
// every outcome. Start runs the start-up checks, returns their error, and
// then dispatches in the background until Stop is called or its context
// ends: a service starts it with its other parts and stops it at shutdown.
func ExampleNew() {
	ctx := context.Background()
	pool, table, done := exampleDB() // the application's pool and outbox table
	defer done()
	exampleEmit(ctx, pool, table, "o-1") // an emitting service committed order.created

	outcomes := make(chan dispatcher.Outcome, 1)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table: table,
		OnOutcome: func(ctx context.Context, o dispatcher.Outcome) {
			outcomes <- o
		},
	})
	if err != nil {
		panic(err)
	}
	type order struct {
		ID string `json:"id"`
	}
	err = d.Handle("order.created", outbox.JSONHandler(func(ctx context.Context, e outbox.Event, o order) error {
		fmt.Println("handling order", o.ID)
		return nil
	}))
	if err != nil {
		panic(err)
	}

	if err := d.Start(ctx); err != nil {
		panic(err) // a missing table, schema drift: nothing was dispatched
	}

	o := <-outcomes
	fmt.Println(o.Event.Type, o.Status)

	// At shutdown: stop claiming, let in-flight handlers finish.
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Println("stop:", d.Stop(stopCtx))
	// Output:
	// handling order o-1
	// order.created SENT
	// stop: <nil>
}

// A failed attempt is retried on the backoff; OnOutcome sees the retry
// (PENDING, with its code and error) and the final outcome.
func ExampleDispatcher_Handle() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	exampleEmit(ctx, pool, table, "o-1")

	outcomes := make(chan dispatcher.Outcome, 2)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:     table,
		Backoff:   outbox.Backoff{Initial: 10 * time.Millisecond},
		OnOutcome: func(ctx context.Context, o dispatcher.Outcome) { outcomes <- o },
	})
	if err != nil {
		panic(err)
	}
	err = d.Handle("order.created", func(ctx context.Context, e outbox.Event) error {
		if e.Attempt == 1 {
			return errors.New("warehouse unavailable")
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = d.Stop(ctx) }()

	for range 2 {
		o := <-outcomes
		switch o.Status {
		case outbox.StatusPending:
			fmt.Printf("attempt %d: retry (%s: %v)\n", o.Event.Attempt, o.Code, o.Err)
		case outbox.StatusSent:
			fmt.Printf("attempt %d: sent\n", o.Event.Attempt)
		case outbox.StatusFailed:
			fmt.Printf("attempt %d: dead letter (%s: %v)\n", o.Event.Attempt, o.Code, o.Err)
		}
	}
	// Output:
	// attempt 1: retry (handler_error: warehouse unavailable)
	// attempt 2: sent
}
