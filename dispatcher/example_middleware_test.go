package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

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

// A dispatcher whose handlers run in a span each (the dispatcher's own,
// through Config.TracerProvider) and under a timeout per event type, with
// a catch-all handler and one hook for every outcome.
func Example_middleware() {
	ctx := context.Background()
	pool, table, done := exampleDB() // the application's pool and outbox table
	defer done()
	exampleEmitTypes(ctx, pool, table, "email.requested", "report.requested", "user.signed_up")

	outcomes := make(chan dispatcher.Outcome, 3)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Table: table,
		// The default, otel.GetTracerProvider(), records once the
		// application installs a provider; set it to use another.
		TracerProvider: noop.NewTracerProvider(),
		// Middleware can only shorten a handler's deadline: HandlerTimeout
		// is the longest any type gets.
		HandlerTimeout: 5 * time.Minute,
		// The span covers the middleware and the handler.
		Middleware: []outbox.Middleware{
			timeoutPerType(map[string]time.Duration{
				"report.requested": 50 * time.Millisecond, // minutes, in a real service
				"email.requested":  10 * time.Second,
			}),
		},
		// Events of types without a handler of their own.
		DefaultHandler: func(ctx context.Context, e outbox.Event) error {
			return nil // ignored
		},
		OnOutcome: func(ctx context.Context, o dispatcher.Outcome) {
			outcomes <- o
		},
	})
	if err != nil {
		panic(err)
	}
	err = d.Handle("email.requested", func(ctx context.Context, e outbox.Event) error {
		return sendEmail(ctx, e.Payload)
	})
	if err != nil {
		panic(err)
	}
	err = d.Handle("report.requested", func(ctx context.Context, e outbox.Event) error {
		<-ctx.Done() // a report that takes longer than its timeout
		return ctx.Err()
	})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = d.Stop(ctx) }()

	// Handlers run concurrently: print the outcomes in type order.
	var lines []string
	for range 3 {
		o := <-outcomes
		line := fmt.Sprint(o.Event.Type, " ", o.Status)
		if o.Code != "" {
			line += " " + string(o.Code)
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// email.requested SENT
	// report.requested PENDING timeout
	// user.signed_up SENT
}

func sendEmail(context.Context, []byte) error { return nil }
