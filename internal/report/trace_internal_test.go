package report

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// testTraceparent is a W3C traceparent header, sampled.
const testTraceparent = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"

// With tracing off, the handler's span reads no header and allocates
// nothing, even for an event that carries a traceparent. (Not parallel:
// AllocsPerRun.)
func TestHandlerSpanOffAllocatesNothing(t *testing.T) {
	s := NewSpans(noop.NewTracerProvider(), publishCode)
	e := &outbox.Event{Type: "x", Headers: map[string]string{traceparent: testTraceparent}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, span := s.HandlerSpan(ctx, e)
		EndHandlerSpan(span, nil, "")
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
		s := NewSpans(sampledOut{TracerProvider: tp, valid: valid}, publishCode)
		_, end := s.PublishSpan(context.Background(), msgs)
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

// A suspect's attempt (recovered before: its first attempt started and was
// lost) records no start delay, though its Attempt is still 1.
func TestStartDelaySkipsSuspects(t *testing.T) {
	t.Parallel()
	mp := &telemetrytest.MeterProvider{}
	m, err := newMetrics(Config{MeterProvider: mp, Table: "public.outbox_events"}, &Counters{})
	require.NoError(t, err)
	e := outbox.Event{Type: "x", Attempt: 1, CreatedAt: time.Now().Add(-time.Minute)}
	m.Started(&e, true, time.Now())
	require.Empty(t, mp.Points("pgoutbox.event.start_delay"))
	m.Started(&e, false, time.Now())
	require.Len(t, mp.Points("pgoutbox.event.start_delay"), 1, "a first attempt")
}
