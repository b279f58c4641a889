package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testTraceparent is a W3C traceparent header, sampled.
const testTraceparent = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"

// With tracing off, the handler's span reads no header and allocates
// nothing, even for an event that carries a traceparent. (Not parallel:
// AllocsPerRun.)
func TestHandlerSpanOffAllocatesNothing(t *testing.T) {
	s := spans{tracer: telemetry.NewTracer(noop.NewTracerProvider())}
	e := &outbox.Event{Type: "x", Headers: map[string]string{traceparent: testTraceparent}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, span := s.handlerSpan(ctx, e)
		endHandlerSpan(span, result{})
	})
	require.Zero(t, allocs)
}

// sampledOut is a TracerProvider whose "publish" batch spans are sampled
// out: valid span contexts that do not record, as an SDK's ratio sampler
// gives. Other spans go to the embedded provider.
type sampledOut struct {
	*telemetrytest.TracerProvider
	valid bool // the batch span's context is valid
}

func (p sampledOut) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return sampledOutTracer{Tracer: p.TracerProvider.Tracer(name, opts...), valid: p.valid}
}

type sampledOutTracer struct {
	trace.Tracer
	valid bool
}

func (t sampledOutTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if name != "publish" {
		return t.Tracer.Start(ctx, name, opts...)
	}
	var sc trace.SpanContext
	if t.valid {
		sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}})
	}
	ctx = trace.ContextWithSpanContext(ctx, sc)
	return ctx, trace.SpanFromContext(ctx)
}

// A batch span sampled out takes no per-message span with it: each
// message's span is started, the child of its emitting span, and linked
// to the batch's when that has a valid span context.
func TestPublishSpansWhenTheBatchIsSampledOut(t *testing.T) {
	t.Parallel()
	msgs := []outbox.Message{
		{Destination: "a", Event: outbox.Event{Type: "x", Headers: map[string]string{traceparent: testTraceparent}}},
		{Destination: "a", Event: outbox.Event{Type: "x"}},
	}
	for _, valid := range []bool{false, true} {
		tp := &telemetrytest.TracerProvider{}
		s := spans{tracer: telemetry.NewTracer(sampledOut{TracerProvider: tp, valid: valid})}
		_, end := s.publishSpan(context.Background(), msgs)
		end([]error{nil, nil})
		each := tp.Named("publish a")
		require.Len(t, each, 2, "valid batch span context: %v", valid)
		require.Equal(t, "0102030405060708090a0b0c0d0e0f10", each[0].Parent.TraceID().String(), "the emitting span's child")
		require.False(t, each[1].Parent.IsValid(), "no traceparent: a new root")
		for _, sp := range each {
			require.True(t, sp.Ended)
			if valid {
				require.Len(t, sp.Links, 1)
				require.Equal(t, trace.SpanID{9}, sp.Links[0].SpanContext.SpanID())
			} else {
				require.Empty(t, sp.Links, "no link to an invalid span context")
			}
		}
	}
}

// panicking is a TracerProvider whose spans panic when started or, with
// atEnd, when ended.
type panicking struct {
	noop.TracerProvider
	atEnd bool
}

func (p panicking) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return panickingTracer{atEnd: p.atEnd}
}

type panickingTracer struct {
	noop.Tracer
	atEnd bool
}

func (t panickingTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.atEnd {
		panic("sampler panic")
	}
	return ctx, panickingSpan{}
}

type panickingSpan struct{ noop.Span }

func (panickingSpan) IsRecording() bool          { return true }
func (panickingSpan) End(...trace.SpanEndOption) { panic("span processor panic") }

// A tracer that panics when a handler's span starts fails that call with
// code panic instead of killing the process, and one that panics when it
// ends leaves the call's result as it was.
func TestHandlerSpanPanicIsRecovered(t *testing.T) {
	t.Parallel()
	for _, atEnd := range []bool{false, true} {
		d, err := New(testdb.SilentPool(t), Config{TracerProvider: panicking{atEnd: atEnd}, OnError: func(error) {},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		ctx, cancel := context.WithCancelCause(context.Background())
		it := &item{event: &outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "x", Attempt: 1},
			ctx: ctx, cancel: cancel, startedAt: time.Now()}
		called := false
		res := d.callHandler(it, func(context.Context, outbox.Event) error { called = true; return nil })
		if atEnd {
			require.True(t, called)
			require.NoError(t, res.err)
			continue
		}
		require.False(t, called)
		require.Equal(t, outbox.CodePanic, res.code)
		require.ErrorContains(t, res.err, "sampler panic")
	}
}

// A suspect's attempt (recovered before: its first attempt started and was
// lost) records no start delay, though its Attempt is still 1.
func TestStartDelaySkipsSuspects(t *testing.T) {
	t.Parallel()
	mp := &telemetrytest.MeterProvider{}
	m, err := newMetrics(Config{MeterProvider: mp, Table: outbox.Table{Schema: "public", Name: "outbox_events"}}, &counters{})
	require.NoError(t, err)
	e := outbox.Event{Type: "x", Attempt: 1, CreatedAt: time.Now().Add(-time.Minute)}
	m.started(&item{event: &e, suspect: true, startedAt: time.Now()})
	require.Empty(t, mp.Points("pgoutbox.event.start_delay"))
	m.started(&item{event: &e, startedAt: time.Now()})
	require.Len(t, mp.Points("pgoutbox.event.start_delay"), 1, "a first attempt")
}
