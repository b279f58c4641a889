package dispatcher

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// endHandlerSpan ends a handler call's span with the call's result: a
// failure (a panic included, but no snooze but the one past MaxSnoozes)
// sets its status to error.
func endHandlerSpan(span trace.Span, res held.Result) {
	var failure error
	if res.Err != nil && !res.Snooze && !res.Release {
		failure = res.Err
	}
	report.EndHandlerSpan(span, failure, res.Code)
}

// endHandlerCall records a handler call's duration and ends its span,
// recovering a panic of the instruments': the result stands.
func (d *Dispatcher) endHandlerCall(it *held.Item, span trace.Span, res held.Result) {
	defer func() {
		if p := recover(); p != nil {
			d.report.Panic("instrumentation", it.Event.Type, it.Event.ID, fmt.Errorf("ending the handler's span: %v", p))
		}
	}()
	d.report.Metrics().Handled(it.Event.Type, it.StartedAt(), res.Ran, res.Code)
	endHandlerSpan(span, res)
}

// TracingMiddleware returns a middleware that runs each handler call in an
// OpenTelemetry span of kind consumer named "handle <event type>", the
// child of the span that emitted the event when the event carries its W3C
// trace context (the traceparent and tracestate headers the emitter
// writes). The span carries the event's id, type, attempt and snoozes; a
// handler error is recorded on the span and sets its status to error (a
// snooze does not), and so does a panic, which the middleware lets go on
// to the dispatcher. An event without a trace context starts a new trace.
// A nil tp (or one that would record nothing) starts no span of its own,
// but the handler's context still carries the emitting span's context.
//
// Deprecated: the dispatcher starts this span itself, through
// Config.TracerProvider (by default the global provider). Within a
// dispatcher whose own span records, TracingMiddleware adds no span,
// whatever tp it was given (that span went to Config.TracerProvider), so
// that no call gets two; it starts one where the dispatcher's span does
// not record (Config.TracerProvider records nothing, or did not sample
// the call) and outside a dispatcher.
func TracingMiddleware(tp trace.TracerProvider) outbox.Middleware {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s := report.NewSpans(tp, nil)
	return func(next outbox.Handler) outbox.Handler {
		return func(ctx context.Context, e outbox.Event) (err error) {
			if report.Spanned(ctx) {
				return next(ctx, e)
			}
			if s.Off() {
				ctx, _ = report.SpanParent(ctx, e.Headers)
				return next(ctx, e)
			}
			ctx, span := s.HandlerSpan(ctx, &e)
			defer span.End()
			defer func() {
				if p := recover(); p != nil {
					span.SetStatus(codes.Error, "handler panic")
					panic(p) // the dispatcher records the panic
				}
			}()
			err = next(ctx, e)
			if _, snoozed := outbox.SnoozeDelay(err); err != nil && !snoozed {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}
