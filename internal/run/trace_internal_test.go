package run

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/outbox"
)

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
		d := testRunner(t, Config{Report: testReporter(panicking{atEnd: atEnd})})
		it := heldItem(t, d, outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "x", Attempt: 1})
		called := false
		res := d.callHandler(it, func(context.Context, outbox.Event) error { called = true; return nil })
		if atEnd {
			require.True(t, called)
			require.NoError(t, res.Err)
			continue
		}
		require.False(t, called)
		require.Equal(t, outbox.CodePanic, res.Code)
		require.ErrorContains(t, res.Err, "sampler panic")
	}
}
