package emitter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Emit counts the events it wrote, by type; a call that wrote nothing
// counts nothing.
func TestEmitCountsEvents(t *testing.T) {
	t.Parallel()
	mp := &telemetrytest.MeterProvider{}
	b := setup(t, emitter.Config{MeterProvider: mp})
	tx := b.begin(t)
	ctx := context.Background()
	a := validEvent()
	_, err := b.emitter.Emit(ctx, tx, a, a, outbox.Event{Type: "other", Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	table := attribute.String("pgoutbox.table", b.db.Table().String())
	require.InDelta(t, 2, mp.Sum("pgoutbox.events.emitted", table, attribute.String("pgoutbox.event.type", a.Type)), 0)
	require.InDelta(t, 1, mp.Sum("pgoutbox.events.emitted", table, attribute.String("pgoutbox.event.type", "other")), 0)

	tx = b.begin(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.emitter.Emit(done, tx, a)
	require.ErrorIs(t, err, context.Canceled)
	_, err = b.emitter.Emit(ctx, tx, outbox.Event{})
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.NoError(t, tx.Rollback(ctx))
	require.InDelta(t, 3, mp.Sum("pgoutbox.events.emitted"), 0, "failed calls count nothing")
}

// Emit runs in a producer span, the child of the span in its context, and
// the events carry that span's traceparent, so that the dispatcher's spans
// are its children.
func TestEmitSpan(t *testing.T) {
	t.Parallel()
	tp := &telemetrytest.TracerProvider{}
	b := setup(t, emitter.Config{TracerProvider: tp})
	ctx, parent := spanContext(t)
	tx := b.begin(t)
	ids, err := b.emitter.Emit(ctx, tx, validEvent())
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	spans := tp.Named("emit " + b.db.Table().String())
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, trace.SpanKindProducer, s.Kind)
	require.Equal(t, parent, s.Parent)
	require.True(t, s.Ended)
	require.Contains(t, s.Attrs, attribute.String("messaging.message.id", ids[0].String()))
	require.Equal(t, "00-"+s.SC.TraceID().String()+"-"+s.SC.SpanID().String()+"-01", b.storedHeaders(t, ids[0])["traceparent"])

	tx = b.begin(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.emitter.Emit(done, tx, validEvent())
	require.Error(t, err)
	require.NoError(t, tx.Rollback(ctx))
	s = tp.Spans()[1]
	require.Equal(t, codes.Error, s.Status, "a failed call's span says so")
	require.True(t, s.Ended)
}

// refusing is a MeterProvider whose SDK refuses every instrument, with a
// nil instrument.
type refusing struct{ noop.MeterProvider }

func (refusing) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

type refusingMeter struct{ noop.Meter }

func (refusingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("instrument name refused")
}

// A counter the MeterProvider refuses is logged and counts nothing, as
// in the dispatcher: New does not fail, and Emit works.
func TestEmitterCarriesOnWhenTheCounterIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{MeterProvider: refusing{}})
	tx := b.begin(t)
	_, err := b.emitter.Emit(context.Background(), tx, validEvent())
	require.NoError(t, err)
	require.NoError(t, tx.Commit(context.Background()))
}
