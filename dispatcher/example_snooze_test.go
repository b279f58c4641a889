package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A handler gives its event back for later, without spending an attempt,
// while the system it needs is not ready.
func Example_snooze() {
	ctx := context.Background()
	pool, table, done := exampleDB()
	defer done()
	exampleEmitTypes(ctx, pool, table, "payment.captured")
	payments := &paymentService{} // rate limited at its first call

	outcomes := make(chan dispatcher.Outcome, 2)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table:     table,
		OnOutcome: func(ctx context.Context, o dispatcher.Outcome) { outcomes <- o },
	})
	if err != nil {
		panic(err)
	}
	err = d.Handle("payment.captured", func(ctx context.Context, e outbox.Event) error {
		err := payments.capture(ctx, e.Payload)
		var limited *rateLimitedError
		if errors.As(err, &limited) {
			return outbox.Snooze(limited.retryAfter) // due again then; attempts unchanged
		}
		return err
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
		fmt.Printf("%s attempt %d, snoozed before: %d, snoozed now: %t\n", o.Status, o.Event.Attempt, o.Event.Snoozes, o.Snoozed)
	}
	// Output:
	// PENDING attempt 1, snoozed before: 0, snoozed now: true
	// SENT attempt 1, snoozed before: 1, snoozed now: false
}

type rateLimitedError struct{ retryAfter time.Duration }

func (e *rateLimitedError) Error() string { return "rate limited" }

// paymentService answers its first call with a rateLimitedError.
type paymentService struct{ calls int }

func (p *paymentService) capture(context.Context, []byte) error {
	p.calls++
	if p.calls == 1 {
		return &rateLimitedError{retryAfter: 20 * time.Millisecond}
	}
	return nil
}
