package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/dispatcher"
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

// recordingTracer is an OpenTelemetry tracer provider that keeps the spans
// it starts.
type recordingTracer struct {
	noop.TracerProvider
	mu    sync.Mutex
	spans []*recordedSpan
}

type recordedSpan struct {
	noop.Span
	name   string
	kind   trace.SpanKind
	parent trace.SpanContext
	sc     trace.SpanContext
	status codes.Code
	ended  bool
	errors []error
	attrs  []attribute.KeyValue
	links  []trace.Link
}

func (s *recordedSpan) IsRecording() bool                      { return true }
func (s *recordedSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }
func (s *recordedSpan) AddLink(l trace.Link)                   { s.links = append(s.links, l) }

func (s *recordedSpan) SpanContext() trace.SpanContext   { return s.sc }
func (s *recordedSpan) SetStatus(c codes.Code, _ string) { s.status = c }
func (s *recordedSpan) End(...trace.SpanEndOption)       { s.ended = true }
func (s *recordedSpan) RecordError(err error, _ ...trace.EventOption) {
	s.errors = append(s.errors, err)
}
func (p *recordingTracer) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracerOf{p: p} }

type tracerOf struct {
	noop.Tracer
	p *recordingTracer
}

func (t tracerOf) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	s := &recordedSpan{name: name, kind: cfg.SpanKind(), parent: parent, links: cfg.Links(), sc: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: parent.TraceID(), SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})}
	t.p.mu.Lock()
	t.p.spans = append(t.p.spans, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

// named returns the spans of that name.
func (p *recordingTracer) named(name string) []*recordedSpan {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*recordedSpan
	for _, s := range p.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
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
			tp := &recordingTracer{}
			var inside trace.SpanContext
			h := dispatcher.TracingMiddleware(tp)(func(ctx context.Context, _ outbox.Event) error {
				inside = trace.SpanContextFromContext(ctx)
				return tt.err
			})
			require.Equal(t, tt.err, h(context.Background(), e))
			require.Len(t, tp.spans, 1)
			s := tp.spans[0]
			require.Equal(t, "handle order.created", s.name)
			require.Equal(t, trace.SpanKindConsumer, s.kind)
			require.Equal(t, traceID, s.parent.TraceID().String(), "the emitting span is the parent")
			require.Equal(t, spanID, s.parent.SpanID().String())
			require.True(t, s.parent.IsRemote())
			require.Equal(t, s.sc, inside, "the handler runs in the span")
			require.Equal(t, tt.status, s.status)
			require.True(t, s.ended)
		})
	}

	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		tp := &recordingTracer{}
		h := dispatcher.TracingMiddleware(tp)(func(context.Context, outbox.Event) error { panic("boom") })
		require.PanicsWithValue(t, "boom", func() { _ = h(context.Background(), e) }, "the panic goes on to the dispatcher")
		require.Len(t, tp.spans, 1)
		require.Equal(t, codes.Error, tp.spans[0].status)
		require.True(t, tp.spans[0].ended)
	})

	t.Run("error recorded", func(t *testing.T) {
		t.Parallel()
		tp := &recordingTracer{}
		h := dispatcher.TracingMiddleware(tp)(func(context.Context, outbox.Event) error { return boom })
		require.ErrorIs(t, h(context.Background(), e), boom)
		require.Equal(t, []error{boom}, tp.spans[0].errors)
	})

	t.Run("no trace context starts a new trace", func(t *testing.T) {
		t.Parallel()
		tp := &recordingTracer{}
		runSpan := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, SpanID: trace.SpanID{9, 9, 9, 9, 9, 9, 9, 9},
		})
		ctx := trace.ContextWithSpanContext(context.Background(), runSpan) // a span in Run's context
		h := dispatcher.TracingMiddleware(tp)(func(context.Context, outbox.Event) error { return nil })
		require.NoError(t, h(ctx, outbox.Event{Type: "order.created"}))
		require.False(t, tp.spans[0].parent.IsValid(), "the span of Run's context is not the parent")
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
