package emitter

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// W3C Trace Context header names, as stored in event headers.
const (
	// HeaderTraceparent carries the emitting span's W3C traceparent.
	HeaderTraceparent = "traceparent"
	// HeaderTracestate carries the emitting span's W3C tracestate, when it
	// has one.
	HeaderTracestate = "tracestate"
)

// traceHeaders returns the W3C Trace Context of the span in ctx, or nil when
// ctx carries no valid span context. Only the OpenTelemetry API is used:
// whatever SDK (or none) the application installed decides the span.
func traceHeaders(ctx context.Context) map[string]string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	h := map[string]string{
		HeaderTraceparent: fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()),
	}
	if ts := sc.TraceState().String(); ts != "" {
		h[HeaderTracestate] = ts
	}
	return h
}

// startSpan starts the producer span of an Emit call, the child of the
// span in ctx, named "emit <schema>.<table>".
// None is started when no one would receive it.
func (in *instruments) startSpan(ctx context.Context, events []outbox.Event, ids []uuid.UUID) (context.Context, trace.Span) {
	if in.tracer.Off() {
		return ctx, trace.SpanFromContext(context.Background()) // the API's no-op
	}
	ctx, span := in.tracer.Start(ctx, in.spanName, trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(
		attribute.String("messaging.system", "pgoutbox"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", in.table),
		attribute.Int("messaging.batch.message_count", len(events)))
	if len(events) == 1 {
		span.SetAttributes(attribute.String("messaging.message.id", ids[0].String()),
			attribute.String("pgoutbox.event.type", events[0].Type))
	}
	return ctx, span
}

// endSpan ends an Emit call's span, with its error.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "emit failed")
	}
	span.End()
}
