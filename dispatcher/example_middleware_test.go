package dispatcher_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// timeoutPerType returns a middleware that bounds each handler call by the
// timeout of its event type; other types keep Config.HandlerTimeout, and
// no type gets more than it (a middleware can only shorten a deadline). A
// handler that returns the context's error is recorded with code timeout.
func timeoutPerType(timeouts map[string]time.Duration) outbox.Middleware {
	return func(next outbox.Handler) outbox.Handler {
		return func(ctx context.Context, e outbox.Event) error {
			if d, ok := timeouts[e.Type]; ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			return next(ctx, e)
		}
	}
}

// A dispatcher whose handlers run in a span each and under a timeout per
// event type, with a catch-all handler and one hook for every outcome.
func Example_middleware() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	tracerProvider := noop.NewTracerProvider() // otel.GetTracerProvider() in an application
	d, err := dispatcher.New(pool, dispatcher.Config{
		// Middleware can only shorten a handler's deadline: HandlerTimeout
		// is the longest any type gets.
		HandlerTimeout: 5 * time.Minute,
		// Outermost first: the span covers the timeout and the handler.
		Middleware: []outbox.Middleware{
			dispatcher.TracingMiddleware(tracerProvider),
			timeoutPerType(map[string]time.Duration{
				"report.requested": 5 * time.Minute,
				"email.requested":  10 * time.Second,
			}),
		},
		// Events of types without a handler of their own.
		DefaultHandler: func(ctx context.Context, e outbox.Event) error {
			log.Printf("ignoring event %s of type %s", e.ID, e.Type)
			return nil
		},
		OnOutcome: func(ctx context.Context, o dispatcher.Outcome) {
			if o.Status == outbox.StatusFailed {
				log.Printf("dead letter: event %s (%s): %s: %v", o.Event.ID, o.Event.Type, o.Code, o.Err)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = d.Handle("email.requested", func(ctx context.Context, e outbox.Event) error {
		return sendEmail(ctx, e.Payload)
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A handler gives its event back for later, without spending an attempt,
// while the system it needs is not ready.
func Example_snooze() {
	var d *dispatcher.Dispatcher // from dispatcher.New
	err := d.Handle("payment.captured", func(ctx context.Context, e outbox.Event) error {
		err := capturePayment(ctx, e.Payload)
		var limited *rateLimitedError
		if errors.As(err, &limited) {
			return outbox.Snooze(limited.retryAfter) // due again then; attempts unchanged
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

type rateLimitedError struct{ retryAfter time.Duration }

func (e *rateLimitedError) Error() string { return "rate limited" }

func sendEmail(context.Context, []byte) error      { return nil }
func capturePayment(context.Context, []byte) error { return nil }
