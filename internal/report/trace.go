package report

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Spans starts the dispatcher's own spans: one per handler call and one
// per Publish call (see docs/observability.md).
type Spans struct {
	tracer telemetry.Tracer
	code   func(error) outbox.Code // a failed publish's code
}

// NewSpans returns the Spans of tp, whose failed publishes' spans carry
// the code publishCode gives (nil: Spans that start no publish span).
func NewSpans(tp trace.TracerProvider, publishCode func(error) outbox.Code) Spans {
	return Spans{tracer: telemetry.NewTracer(tp), code: publishCode}
}

// Off reports whether a span started now would reach no one.
func (s Spans) Off() bool { return s.tracer.Off() }

// NoSpan is the span of a call that has none: the API's no-op.
var NoSpan = trace.SpanFromContext(context.Background())

// The start options of the spans, allocated once.
var (
	consumerRoot  = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	consumerChild = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
)

// spannedKey marks the context of a handler call whose span the
// dispatcher started and records, so that TracingMiddleware adds none.
type spannedKey struct{}

// Spanned reports whether ctx is that of a handler call whose span the
// dispatcher started and records.
func Spanned(ctx context.Context) bool { return ctx.Value(spannedKey{}) != nil }

// HandlerSpan starts the span of a handler call: a consumer span named
// "handle <event type>", the child of the span that emitted the event.
// When no one would receive the span, none is started and the headers are
// not read: the handler's context then carries no emitting span context
// (which costs allocations per event for no one).
func (s Spans) HandlerSpan(ctx context.Context, e *outbox.Event) (context.Context, trace.Span) {
	if s.tracer.Off() {
		return ctx, NoSpan
	}
	ctx, root := SpanParent(ctx, e.Headers)
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

// EndHandlerSpan ends a handler call's span with the call's failure, if
// it failed (a panic included, but no snooze but the one past MaxSnoozes,
// and no release): then it records failure and sets the span's status to
// error with code.
func EndHandlerSpan(span trace.Span, failure error, code outbox.Code) {
	if failure != nil {
		span.RecordError(failure)
		span.SetStatus(codes.Error, string(code))
	}
	span.End()
}

// PublishSpan starts the span of a Publish call, of kind producer. For
// one message, it is the child of the span that emitted the event; for
// several, it starts a trace of its own, linked to each emitting span,
// and each message gets a span of its own, the child of its emitting span
// (sampled by its own parent, whether the call's span is or not) and
// linked to the call's when that has a valid span context. Call end with
// each message's error.
func (s Spans) PublishSpan(ctx context.Context, msgs []outbox.Message) (_ context.Context, end func(errs []error)) {
	if s.tracer.Off() {
		return ctx, func([]error) {}
	}
	if len(msgs) == 1 {
		ctx, span := s.startPublish(ctx, msgs[0])
		return ctx, func(errs []error) { s.endPublishSpan(span, errs[0]) }
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
			s.endPublishSpan(each[i], err)
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
func (s Spans) startPublish(ctx context.Context, m outbox.Message, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, root := SpanParent(ctx, m.Event.Headers)
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

func (s Spans) endPublishSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, string(s.code(err)))
	}
	span.End()
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

// SpanParent returns ctx with the emitting span's context, which the
// event's headers carry, as the parent of the span to start. An event
// without one starts a new trace (root) rather than join whatever span
// the context passed to Run carried.
func SpanParent(ctx context.Context, headers map[string]string) (_ context.Context, root bool) {
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
