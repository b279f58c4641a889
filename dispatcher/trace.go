package dispatcher

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/outbox"
)

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
