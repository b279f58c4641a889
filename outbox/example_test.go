package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// An event with a JSON payload, ready for Emitter.Emit. Only Type is
// required; the aggregate names what the event is about, and the partition
// key (the aggregate ID when empty) keeps one order's events in order on the
// broker.
func ExampleNewJSON() {
	e, err := outbox.NewJSON("order.created", map[string]any{"order_id": "o-1", "total_cents": 4200})
	if err != nil {
		panic(err)
	}
	e.AggregateType, e.AggregateID = "order", "o-1"
	e.Headers = map[string]string{"tenant": "acme"}

	fmt.Println(e.Type, e.ContentType)
	fmt.Println(string(e.Payload))
	// Output:
	// order.created application/json
	// {"order_id":"o-1","total_cents":4200}
}

// A retry policy for dispatcher.Config.Backoff: 100ms after the first
// failed attempt, doubling up to 1s. NoJitter makes the delays exact;
// the default jitter spreads them by ±10% so replicas do not retry in
// lockstep.
func ExampleBackoff_Delay() {
	b := outbox.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second, NoJitter: true}
	for n := 1; n <= 5; n++ {
		fmt.Printf("after attempt %d: %s\n", n, b.Delay(n))
	}
	// Output:
	// after attempt 1: 100ms
	// after attempt 2: 200ms
	// after attempt 3: 400ms
	// after attempt 4: 800ms
	// after attempt 5: 1s
}

// The zero Backoff is DefaultBackoff: it needs no set-up before use.
func ExampleBackoff_zero() {
	var b outbox.Backoff
	fmt.Println(b.Validate("Backoff"), b.WithDefaults() == outbox.DefaultBackoff)
	// Output:
	// <nil> true
}

// A handler that fails permanently when retrying cannot help: the
// dispatcher records the event FAILED after this attempt instead of
// scheduling a retry. Any other error is retried on the backoff.
func ExamplePermanent() {
	errUnknownCustomer := errors.New("unknown customer")
	handler := func(ctx context.Context, e outbox.Event) error {
		if e.AggregateID == "" {
			return outbox.Permanent(errUnknownCustomer)
		}
		return errors.New("mail server busy") // retried
	}

	err := handler(context.Background(), outbox.Event{Type: "invoice.issued"})
	fmt.Println(outbox.IsPermanent(err), errors.Is(err, errUnknownCustomer))
	err = handler(context.Background(), outbox.Event{Type: "invoice.issued", AggregateID: "c-7"})
	fmt.Println(outbox.IsPermanent(err))
	// Output:
	// true true
	// false
}

// A handler that gives its event back without spending an attempt while
// the system it needs is not ready: the dispatcher makes the event due
// again after the delay, with its attempts unchanged.
func ExampleSnooze() {
	bankReady := false
	handler := func(ctx context.Context, e outbox.Event) error {
		if !bankReady {
			return fmt.Errorf("waiting for the bank: %w", outbox.Snooze(30*time.Second))
		}
		return nil
	}

	err := handler(context.Background(), outbox.Event{Type: "payment.captured"})
	d, snoozed := outbox.SnoozeDelay(err)
	fmt.Println(snoozed, d)
	// Output:
	// true 30s
}

// Handler middleware that logs each event's type and outcome; register it
// with dispatcher.Config.Middleware (every handler) or as an extra
// argument of Dispatcher.Handle (one handler).
func ExampleMiddleware() {
	logged := func(next outbox.Handler) outbox.Handler {
		return func(ctx context.Context, e outbox.Event) error {
			err := next(ctx, e)
			fmt.Printf("%s attempt %d: err=%v\n", e.Type, e.Attempt, err)
			return err
		}
	}

	h := logged(func(ctx context.Context, e outbox.Event) error { return nil })
	_ = h(context.Background(), outbox.Event{Type: "order.created", Attempt: 1})
	// Output:
	// order.created attempt 1: err=<nil>
}

// Several outboxes may live in one database; the zero Table is the
// default one.
func ExampleTable() {
	fmt.Println(outbox.Table{})
	fmt.Println(outbox.Table{Schema: "billing", Name: "invoice_events"})
	fmt.Println(outbox.Table{Name: "Invoice-Events"}.Validate() != nil)
	// Output:
	// public.outbox_events
	// billing.invoice_events
	// true
}
