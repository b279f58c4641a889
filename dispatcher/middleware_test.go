package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// trail records the steps of handler calls, in order.
type trail struct {
	mu    sync.Mutex
	steps []string
}

func (tr *trail) add(step string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.steps = append(tr.steps, step)
}

func (tr *trail) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.steps...)
}

// named returns a middleware that records entering and leaving it.
func (tr *trail) named(name string) outbox.Middleware {
	return func(next outbox.Handler) outbox.Handler {
		return func(ctx context.Context, e outbox.Event) error {
			tr.add(name + ">")
			defer tr.add("<" + name)
			return next(ctx, e)
		}
	}
}

// The configured chain wraps the per-handler chain, each outermost first;
// DefaultHandler takes the types without a handler, inside the configured
// chain only.
func TestMiddlewareOrderAndDefaultHandler(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	known := insertEvents(t, db, "known", 1)[0]
	var tr trail
	outcomes := &outcomeLog{}
	cfg := baseConfig(db)
	cfg.Concurrency = 1
	cfg.Middleware = []outbox.Middleware{tr.named("A"), tr.named("B")}
	cfg.DefaultHandler = func(_ context.Context, e outbox.Event) error {
		tr.add("default " + e.Type)
		return nil
	}
	cfg.OnOutcome = outcomes.add
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("known", func(context.Context, outbox.Event) error {
		tr.add("known")
		return nil
	}, tr.named("C"), tr.named("D")))
	runDispatcher(t, d)

	require.Equal(t, outbox.StatusSent, outcomes.wait(t, known, 1)[0].Status)
	require.Equal(t, []string{"A>", "B>", "C>", "D>", "known", "<D", "<C", "<B", "<A"}, tr.get())

	other := insertEvents(t, db, "other", 1)[0]
	d.Trigger()
	require.Equal(t, outbox.StatusSent, outcomes.wait(t, other, 1)[0].Status, "the catch-all takes it: no no_handler")
	require.Equal(t, []string{"A>", "B>", "default other", "<B", "<A"}, tr.get()[9:])
	require.Equal(t, row{Status: outbox.StatusSent, Attempts: 1}, readRow(t, db, other))
}

// The timeout-per-type middleware of the example bounds the types it names
// and records their timeouts with code timeout.
func TestTimeoutPerTypeMiddleware(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	short := insertEvents(t, db, "short", 1)[0]
	long := insertEvents(t, db, "long", 1)[0]
	outcomes := &outcomeLog{}
	cfg := baseConfig(db)
	cfg.MaxAttempts = 1
	cfg.Middleware = []outbox.Middleware{timeoutPerType(map[string]time.Duration{"short": 50 * time.Millisecond})}
	cfg.OnOutcome = outcomes.add
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	waitOut := func(ctx context.Context, _ outbox.Event) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	}
	require.NoError(t, d.Handle("short", waitOut))
	require.NoError(t, d.Handle("long", waitOut))
	runDispatcher(t, d)

	o := outcomes.wait(t, short, 1)[0]
	require.Equal(t, outbox.StatusFailed, o.Status)
	require.Equal(t, outbox.CodeTimeout, o.Code)
	require.ErrorIs(t, o.Err, context.DeadlineExceeded, "cut short: the handler would have waited 300ms")
	require.Equal(t, outbox.StatusSent, outcomes.wait(t, long, 1)[0].Status)
}

func TestMiddlewareConfigErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	pool := db.NewPool(t, 1)
	ok := func(next outbox.Handler) outbox.Handler { return next }
	returnsNil := func(outbox.Handler) outbox.Handler { return nil }
	h := func(context.Context, outbox.Event) error { return nil }

	_, err := dispatcher.New(pool, dispatcher.Config{Middleware: []outbox.Middleware{ok, nil}})
	var cerr *outbox.ConfigError
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "Middleware", cerr.Field)

	_, err = dispatcher.New(pool, dispatcher.Config{Middleware: []outbox.Middleware{returnsNil}, DefaultHandler: h})
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "Middleware", cerr.Field)

	d, err := dispatcher.New(pool, dispatcher.Config{})
	require.NoError(t, err)
	var ierr *outbox.InputError
	require.ErrorAs(t, d.Handle("x", h, nil), &ierr)
	require.Equal(t, "mw", ierr.Field)
	require.ErrorAs(t, d.Handle("x", h, returnsNil), &ierr)
	require.Equal(t, "mw", ierr.Field)
	require.ErrorIs(t, ierr, outbox.ErrInvalidInput)
	require.NoError(t, d.Handle("x", h, ok), "the failed calls registered nothing")
}

func TestTracingMiddleware(t *testing.T) {
	t.Parallel()
	const traceID, spanID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	e := outbox.Event{Type: "order.created", Headers: map[string]string{
		"traceparent": "00-" + traceID + "-" + spanID + "-01",
	}}
	boom := errors.New("boom")
	for _, tt := range []struct {
		name   string
		err    error
		status codes.Code
	}{
		{"error", boom, codes.Error},
		{"snooze", outbox.Snooze(time.Second), codes.Unset},
		{"success", nil, codes.Unset},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp := &telemetrytest.TracerProvider{}
			var inside trace.SpanContext
			h := dispatcher.TracingMiddleware(tp)(func(ctx context.Context, _ outbox.Event) error {
				inside = trace.SpanContextFromContext(ctx)
				return tt.err
			})
			require.Equal(t, tt.err, h(context.Background(), e))
			require.Len(t, tp.Spans(), 1)
			s := tp.Spans()[0]
			require.Equal(t, "handle order.created", s.Name)
			require.Equal(t, trace.SpanKindConsumer, s.Kind)
			require.Equal(t, traceID, s.Parent.TraceID().String(), "the emitting span is the parent")
			require.Equal(t, spanID, s.Parent.SpanID().String())
			require.True(t, s.Parent.IsRemote())
			require.Equal(t, s.SC, inside, "the handler runs in the span")
			require.Equal(t, tt.status, s.Status)
			require.True(t, s.Ended)
		})
	}

	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		tp := &telemetrytest.TracerProvider{}
		h := dispatcher.TracingMiddleware(tp)(func(context.Context, outbox.Event) error { panic("boom") })
		require.PanicsWithValue(t, "boom", func() { _ = h(context.Background(), e) }, "the panic goes on to the dispatcher")
		require.Len(t, tp.Spans(), 1)
		require.Equal(t, codes.Error, tp.Spans()[0].Status)
		require.True(t, tp.Spans()[0].Ended)
	})

	t.Run("error recorded", func(t *testing.T) {
		t.Parallel()
		tp := &telemetrytest.TracerProvider{}
		h := dispatcher.TracingMiddleware(tp)(func(context.Context, outbox.Event) error { return boom })
		require.ErrorIs(t, h(context.Background(), e), boom)
		require.Equal(t, []error{boom}, tp.Spans()[0].Errors)
	})

	t.Run("no trace context starts a new trace", func(t *testing.T) {
		t.Parallel()
		tp := &telemetrytest.TracerProvider{}
		runSpan := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, SpanID: trace.SpanID{9, 9, 9, 9, 9, 9, 9, 9},
		})
		ctx := trace.ContextWithSpanContext(context.Background(), runSpan) // a span in Run's context
		h := dispatcher.TracingMiddleware(tp)(func(context.Context, outbox.Event) error { return nil })
		require.NoError(t, h(ctx, outbox.Event{Type: "order.created"}))
		require.False(t, tp.Spans()[0].Parent.IsValid(), "the span of Run's context is not the parent")
	})

	t.Run("nil provider", func(t *testing.T) {
		t.Parallel()
		var inside trace.SpanContext
		h := dispatcher.TracingMiddleware(nil)(func(ctx context.Context, _ outbox.Event) error {
			inside = trace.SpanContextFromContext(ctx)
			return nil
		})
		require.NoError(t, h(context.Background(), e))
		require.Equal(t, traceID, inside.TraceID().String(), "the handler still joins the emitting trace")
	})
}
