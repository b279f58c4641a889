package dispatcher_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// emitInSpan emits one event of the type in a transaction whose context
// carries a span with the given span id, and returns the event's id and
// that span's context.
func emitInSpan(t *testing.T, db *testdb.DB, eventType string, spanID byte) (uuid.UUID, trace.SpanContext) {
	t.Helper()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{spanID, 1}, SpanID: trace.SpanID{spanID, 2}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	em, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	var ids []uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		ids, err = em.Emit(ctx, tx, outbox.Event{Type: eventType, Payload: []byte(`{}`)})
		return err
	}))
	return ids[0], sc
}

// requireChildOf checks that the span continues the emitting span.
func requireChildOf(t *testing.T, s *telemetrytest.Span, emitted trace.SpanContext) {
	t.Helper()
	require.Equal(t, emitted.TraceID(), s.Parent.TraceID())
	require.Equal(t, emitted.SpanID(), s.Parent.SpanID())
	require.True(t, s.Parent.IsRemote())
	require.True(t, s.Ended)
}

// By default the dispatcher runs each handler call and each Publish call
// in a span of Config.TracerProvider that continues the emitting span,
// with the event's id and type; TracingMiddleware in the chain adds no
// second span; a batch of messages gets a span of its own, linked to the
// emitting spans, and one span per message.
func TestDispatcherSpans(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	handled, handledSpan := emitInSpan(t, db, "handled", 1)
	pub1, pub1Span := emitInSpan(t, db, "pub", 2)
	pub2, pub2Span := emitInSpan(t, db, "pub", 3)
	tp := &telemetrytest.TracerProvider{}
	outcomes := &outcomeLog{}
	cfg := baseConfig(db)
	cfg.TracerProvider = tp
	cfg.Middleware = []outbox.Middleware{dispatcher.TracingMiddleware(tp)}
	cfg.OnOutcome = outcomes.add
	publishPub(&cfg)
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	var inside trace.SpanContext
	require.NoError(t, d.Handle("handled", func(ctx context.Context, _ outbox.Event) error {
		inside = trace.SpanContextFromContext(ctx)
		return nil
	}))
	runDispatcher(t, d)
	for _, id := range []uuid.UUID{handled, pub1, pub2} {
		outcomes.wait(t, id, 1)
	}

	spans := tp.Named("handle handled")
	require.Len(t, spans, 1, "one span: TracingMiddleware adds none to the dispatcher's")
	requireChildOf(t, spans[0], handledSpan)
	require.Equal(t, trace.SpanKindConsumer, spans[0].Kind)
	require.Equal(t, spans[0].SC, inside, "the handler runs in the span")
	require.Contains(t, spans[0].Attrs, attribute.String("messaging.message.id", handled.String()))
	require.Contains(t, spans[0].Attrs, attribute.String("pgoutbox.event.type", "handled"))

	batch := tp.Named("publish")
	require.Len(t, batch, 1, "both pub events in one Publish call")
	require.False(t, batch[0].Parent.IsValid(), "a batch starts a trace of its own")
	require.ElementsMatch(t, []trace.SpanContext{pub1Span, pub2Span}, linked(batch[0]))
	require.Equal(t, trace.SpanKindProducer, batch[0].Kind)
	msgs := tp.Named("publish topic")
	require.Len(t, msgs, 2)
	for _, s := range msgs {
		emitted := pub1Span
		if s.Parent.SpanID() == pub2Span.SpanID() {
			emitted = pub2Span
		}
		requireChildOf(t, s, emitted)
		require.Equal(t, []trace.SpanContext{batch[0].SC}, linked(s), "linked to the batch's span")
		require.Equal(t, codes.Unset, s.Status)
	}

	one, oneSpan := emitInSpan(t, db, "pub", 4)
	d.Trigger()
	outcomes.wait(t, one, 1)
	msgs = tp.Named("publish topic")
	require.Len(t, msgs, 3, "one message: its span alone")
	requireChildOf(t, msgs[2], oneSpan)
	require.Contains(t, msgs[2].Attrs, attribute.String("messaging.message.id", one.String()))
	require.Len(t, tp.Named("publish"), 1)
}

func linked(s *telemetrytest.Span) []trace.SpanContext {
	var out []trace.SpanContext
	for _, l := range s.Links {
		out = append(out, l.SpanContext.WithRemote(false))
	}
	return out
}
