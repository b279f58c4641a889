package dispatcher

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// spans starts the dispatcher's own spans: one per handler call and one
// per Publish call (see docs/observability.md).
type spans struct {
	tracer telemetry.Tracer
}

// noSpan is the span of a call that has none: the API's no-op.
var noSpan = trace.SpanFromContext(context.Background())

// The start options of the spans, allocated once.
var (
	consumerRoot  = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	consumerChild = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// spannedKey marks the context of a handler call whose span the
// dispatcher started and records, so that TracingMiddleware adds none.
type spannedKey struct{}

// handlerSpan starts the span of a handler call: a consumer span named
// "handle <event type>", the child of the span that emitted the event.
// When no one would receive the span, none is started and the headers are
// not read: the handler's context then carries no emitting span context
// (which costs allocations per event for no one).
func (s spans) handlerSpan(ctx context.Context, e *outbox.Event) (context.Context, trace.Span) {
	if s.tracer.Off() {
		return ctx, noSpan
	}
	ctx, root := spanParent(ctx, e.Headers)
	opts := consumerChild
	if root {
		opts = consumerRoot
	}
	ctx, span := s.tracer.Start(ctx, "handle "+e.Type, opts...)
	if span.IsRecording() {
		span.SetAttributes(eventAttributes(e, "process")...)
		ctx = context.WithValue(ctx, spannedKey{}, true)
	}
	return ctx, span
}

// endHandlerSpan ends a handler call's span with the call's result: a
// failure (a panic included, but no snooze but the one past MaxSnoozes)
// sets its status to error.
func endHandlerSpan(span trace.Span, res held.Result) {
	if res.Err != nil && !res.Snooze && !res.Release {
		span.RecordError(res.Err)
		span.SetStatus(codes.Error, string(res.Code))
	}
	span.End()
}

// endHandlerCall records a handler call's duration and ends its span,
// recovering a panic of the instruments': the result stands.
func (d *Dispatcher) endHandlerCall(it *held.Item, span trace.Span, res held.Result) {
	defer func() {
		if p := recover(); p != nil {
			d.logPanic("instrumentation", it.Event.Type, it.Event.ID, fmt.Errorf("ending the handler's span: %v", p))
		}
	}()
	d.metrics.handled(it, res)
	endHandlerSpan(span, res)
}

// publishSpan starts the span of a Publish call, of kind producer. For
// one message, it is the child of the span that emitted the event; for
// several, it starts a trace of its own, linked to each emitting span,
// and each message gets a span of its own, the child of its emitting span
// (sampled by its own parent, whether the call's span is or not) and
// linked to the call's when that has a valid span context.
func (s spans) publishSpan(ctx context.Context, msgs []outbox.Message) (context.Context, func(errs []error)) {
	if s.tracer.Off() {
		return ctx, func([]error) {}
	}
	if len(msgs) == 1 {
		ctx, span := s.startPublish(ctx, msgs[0])
		return ctx, func(errs []error) { endPublishSpan(span, errs[0]) }
	}
	ctx, span := s.tracer.Start(ctx, "publish", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "pgoutbox"),
			attribute.String("messaging.operation.type", "send"), attribute.Int("messaging.batch.message_count", len(msgs)))
	}
	var opts []trace.SpanStartOption
	if batch := span.SpanContext(); batch.IsValid() {
		opts = []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: batch})}
	}
	each := make([]trace.Span, len(msgs))
	for i, m := range msgs {
		if span.IsRecording() {
			if emitted := emittedSpan(m.Event.Headers); emitted.IsValid() {
				span.AddLink(trace.Link{SpanContext: emitted})
			}
		}
		_, each[i] = s.startPublish(ctx, m, opts...)
	}
	return ctx, func(errs []error) {
		failed := 0
		for i, err := range errs {
			endPublishSpan(each[i], err)
			if err != nil {
				failed++
			}
		}
		if failed > 0 {
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages failed", failed, len(msgs)))
		}
		span.End()
	}
}

// startPublish starts the span of one message's publish.
func (s spans) startPublish(ctx context.Context, m outbox.Message, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, root := spanParent(ctx, m.Event.Headers)
	if root {
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := s.tracer.Start(ctx, "publish "+m.Destination, append(opts, trace.WithSpanKind(trace.SpanKindProducer))...)
	if span.IsRecording() {
		span.SetAttributes(append(eventAttributes(&m.Event, "send"),
			attribute.String("messaging.destination.name", m.Destination))...)
	}
	return ctx, span
}

func endPublishSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, string(publishCode(err)))
	}
	span.End()
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
	s := spans{tracer: telemetry.NewTracer(tp)}
	return func(next outbox.Handler) outbox.Handler {
		return func(ctx context.Context, e outbox.Event) (err error) {
			if ctx.Value(spannedKey{}) != nil {
				return next(ctx, e)
			}
			if s.tracer.Off() {
				ctx, _ = spanParent(ctx, e.Headers)
				return next(ctx, e)
			}
			ctx, span := s.handlerSpan(ctx, &e)
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

// emittedSpan is the span context of the span that emitted an event,
// from its traceparent and tracestate headers; invalid when it has none.
func emittedSpan(headers map[string]string) trace.SpanContext {
	if headers[traceparent] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(
		propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(headers)))
}

// traceparent is the W3C header the emitter writes (emitter.HeaderTraceparent).
const traceparent = "traceparent"

// spanParent returns ctx with the emitting span's context, which the
// event's headers carry, as the parent of the span to start. An event
// without one starts a new trace (root) rather than join whatever span
// the context passed to Run carried.
func spanParent(ctx context.Context, headers map[string]string) (_ context.Context, root bool) {
	emitted := emittedSpan(headers)
	if !emitted.IsValid() {
		return ctx, true
	}
	return trace.ContextWithRemoteSpanContext(ctx, emitted), false
}

// eventAttributes are the attributes of a span about one event.
func eventAttributes(e *outbox.Event, operation string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "pgoutbox"),
		attribute.String("messaging.operation.type", operation),
		attribute.String("messaging.message.id", e.ID.String()),
		telemetry.KeyEventType.String(e.Type),
		attribute.Int("pgoutbox.event.attempt", e.Attempt),
		attribute.Int("pgoutbox.event.snoozes", e.Snoozes),
	}
}
