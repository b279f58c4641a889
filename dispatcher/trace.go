package dispatcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// tracerName is the instrumentation scope of TracingMiddleware's spans.
const tracerName = "github.com/pgoutbox/pgoutbox/dispatcher"

// TracingMiddleware returns a middleware that runs each handler call in an
// OpenTelemetry span of kind consumer named "handle <event type>", the
// child of the span that emitted the event when the event carries its W3C
// trace context (the traceparent and tracestate headers the emitter
// writes), so that a trace follows an event from the transaction that
// emitted it into its handler. The span carries the event's id, type,
// attempt and snoozes; a handler error is recorded on the span and sets
// its status to error, with the error's text (a snooze does not, even the
// one past MaxSnoozes that makes the event FAILED), and so does a panic,
// which the middleware lets go on to the dispatcher. An event without a
// trace context starts a new trace. Put it first in Config.Middleware so
// that the other middleware runs inside its span. Pass otel.GetTracerProvider() for the
// application's global provider; a nil tp starts no span of its own, but
// the handler's context still carries the emitting span's context.
//
// Only the OpenTelemetry API is used: whatever SDK (or none) the
// application installed records the spans.
func TracingMiddleware(tp trace.TracerProvider) outbox.Middleware {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	tracer := tp.Tracer(tracerName)
	return func(next outbox.Handler) outbox.Handler {
		return func(ctx context.Context, e outbox.Event) (err error) {
			ctx, opts := spanParent(ctx, e)
			ctx, span := tracer.Start(ctx, "handle "+e.Type, append(opts, trace.WithSpanKind(trace.SpanKindConsumer), spanAttributes(e))...)
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

// spanParent returns ctx with the emitting span's context, which the
// event's headers carry, as the parent of the handler call's span. An
// event without one starts a new trace rather than join whatever span the
// context passed to Run carried.
func spanParent(ctx context.Context, e outbox.Event) (context.Context, []trace.SpanStartOption) {
	emitted := trace.SpanContextFromContext(
		propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(e.Headers)))
	if !emitted.IsValid() {
		return ctx, []trace.SpanStartOption{trace.WithNewRoot()}
	}
	return trace.ContextWithRemoteSpanContext(ctx, emitted), nil
}

// spanAttributes are the kind and attributes of a handler call's span.
func spanAttributes(e outbox.Event) trace.SpanStartEventOption {
	return trace.WithAttributes(
		attribute.String("messaging.system", "pgoutbox"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", e.ID.String()),
		attribute.String("pgoutbox.event.type", e.Type),
		attribute.Int("pgoutbox.event.attempt", e.Attempt),
		attribute.Int("pgoutbox.event.snoozes", e.Snoozes),
	)
}
