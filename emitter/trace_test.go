package emitter_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// spanContext returns a context carrying a sampled span, as an
// OpenTelemetry SDK would; only the API is needed to make one.
func spanContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=abc")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

// storedHeaders reads an event's headers back.
func (b *testBundle) storedHeaders(t *testing.T, id uuid.UUID) map[string]string {
	t.Helper()
	var h map[string]string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT headers FROM outbox_events WHERE id = $1`, id).Scan(&h))
	return h
}

func TestEmitTraceContext(t *testing.T) {
	t.Parallel()
	t.Run("CallerTraceparentWins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{})
		ctx, _ := spanContext(t)
		ev := validEvent()
		ev.Headers = map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, ev)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, ev.Headers, b.storedHeaders(t, ids[0]))
	})
	t.Run("Disabled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{DisableTracePropagation: true})
		ctx, _ := spanContext(t)
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, validEvent())
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.NotContains(t, b.storedHeaders(t, ids[0]), "traceparent")
	})
	t.Run("NoSpanNoHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{})
		tx := b.begin(t)
		ids, err := b.emitter.Emit(context.Background(), tx, validEvent())
		require.NoError(t, err)
		require.NoError(t, tx.Commit(context.Background()))
		require.Equal(t, validEvent().Headers, b.storedHeaders(t, ids[0]))
	})
	for name, n := range map[string]int{"Insert": 3, "Copy": 5000} {
		t.Run("SpanInContextIsStored"+name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, emitter.Config{})
			ctx, _ := spanContext(t)
			own := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}
			events := manyEvents(n, 0)
			events[1] = outbox.Event{Type: "no.headers", Payload: []byte("x")}
			events[2].Headers = own
			tx := b.begin(t)
			ids, err := b.emitter.Emit(ctx, tx, events...)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			for _, id := range ids[:2] {
				h := b.storedHeaders(t, id)
				require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", h["traceparent"])
				require.Equal(t, "vendor=abc", h["tracestate"])
			}
			require.Equal(t, headerMarker, b.storedHeaders(t, ids[0])["trace"], "the caller's headers are kept")
			require.Equal(t, own, b.storedHeaders(t, ids[2]), "an event's own traceparent wins")
			require.Len(t, events[0].Headers, 1, "the caller's map is not modified")
			require.Nil(t, events[1].Headers)
		})
	}
}
