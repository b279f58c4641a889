package telemetry_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/internal/telemetry/telemetrytest"
)

// A tracer of the global provider is off until the application installs
// a provider, and on from then on, even when it was made before; a no-op
// provider is off, any other on. (Not parallel: it sets the global
// provider, which no other test of this package reads.)
func TestTracerOff(t *testing.T) {
	global := telemetry.NewTracer(otel.GetTracerProvider())
	require.True(t, global.Off(), "no provider installed")
	require.True(t, telemetry.NewTracer(noop.NewTracerProvider()).Off())
	require.False(t, telemetry.NewTracer(&telemetrytest.TracerProvider{}).Off())

	otel.SetTracerProvider(&telemetrytest.TracerProvider{})
	require.False(t, global.Off(), "made before the provider was installed")
	require.False(t, telemetry.NewTracer(otel.GetTracerProvider()).Off())
}

// Past MaxTypes distinct types, new ones share the attribute set of
// OtherType.
func TestSetsBound(t *testing.T) {
	t.Parallel()
	s := telemetry.NewSets("public.outbox_events")
	for i := range telemetry.MaxTypes {
		s.Of(string(rune('a'+i%26))+string(rune(i)), "")
	}
	require.Equal(t, s.Of(telemetry.OtherType, ""), s.Of("one.too.many", ""))
	require.Equal(t, s.Of("one.too.many", ""), s.Of("another", ""))
	require.NotEqual(t, s.Of(telemetry.OtherType, ""), s.Of(telemetry.OtherType, "handler_error"))
}

// The bound counts types, not (type, code) pairs: a type admitted before
// the bound keeps its name for a code first seen after it.
func TestSetsKnownTypeKeepsItsNameForNewCodes(t *testing.T) {
	t.Parallel()
	s := telemetry.NewSets("public.outbox_events")
	s.Of("order.created", "")
	for i := range telemetry.MaxTypes {
		s.Of(fmt.Sprintf("t%d", i), "")
	}
	require.NotEqual(t, s.Of(telemetry.OtherType, "handler_error"), s.Of("order.created", "handler_error"))
	require.Equal(t, s.Of(telemetry.OtherType, "handler_error"), s.Of(fmt.Sprintf("t%d", telemetry.MaxTypes-1), "handler_error"),
		"the type past the bound")
}

// Concurrent lookups of new and cached sets agree (run with -race).
func TestSetsConcurrent(t *testing.T) {
	t.Parallel()
	s := telemetry.NewSets("public.outbox_events")
	var wg sync.WaitGroup
	got := make([]any, 8)
	for g := range got {
		wg.Go(func() {
			for i := range 100 {
				s.Of(fmt.Sprintf("t%d", i), "")
			}
			got[g] = s.Of("t7", "timeout")
		})
	}
	wg.Wait()
	for _, o := range got {
		require.Equal(t, got[0], o)
	}
}
