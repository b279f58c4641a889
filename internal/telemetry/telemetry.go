// Package telemetry holds what the emitter and the dispatcher share to
// report through the OpenTelemetry API: the instrumentation scope, the
// attribute keys, the histogram buckets and a bounded cache of attribute
// sets per event type. It uses the API only, never an SDK.
package telemetry

import (
	"reflect"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of pgoutbox's meters and tracers.
const Scope = "github.com/pgoutbox/pgoutbox"

// Attribute keys of pgoutbox's metrics and spans.
const (
	// KeyTable is the outbox table, "<schema>.<table>".
	KeyTable = attribute.Key("pgoutbox.table")
	// KeyEventType is the event's type (see MaxTypes for its bound).
	KeyEventType = attribute.Key("pgoutbox.event.type")
	// KeyErrorType is the outbox.Code of a failure (the semantic
	// conventions' error.type).
	KeyErrorType = attribute.Key("error.type")
)

// MaxTypes bounds the distinct event types one Sets admits: past it, new
// event types are reported as OtherType, so that a program emitting
// unbounded types cannot make a metric's cardinality unbounded. An
// admitted type keeps its name with any error code. Each Dispatcher and
// each Emitter has a Sets of its own: the bound is theirs, not the
// process's.
const MaxTypes = 500

// OtherType stands for the event types past MaxTypes.
const OtherType = "_other"

// DurationBuckets are the bucket bounds, in seconds, of the duration
// histograms (those the semantic conventions advise for messaging).
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// LatencyBuckets are the bucket bounds, in seconds, of the latency from
// an event's creation to its first start, which includes polls and
// backlogs.
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Sets caches, per event type and error code, the measurement option of
// the attribute set {table, event type[, error.type]}, so that a
// measurement allocates nothing. The zero value is not usable; see
// NewSets. It is safe for concurrent use; a set already cached is read
// under a read lock only.
type Sets struct {
	table attribute.KeyValue
	mu    sync.RWMutex
	sets  map[setKey]metric.MeasurementOption
	types map[string]struct{} // the admitted event types, at most MaxTypes
}

type setKey struct{ eventType, code string }

// NewSets returns an empty cache for the given table name.
func NewSets(table string) *Sets {
	return &Sets{table: KeyTable.String(table), sets: map[setKey]metric.MeasurementOption{}, types: map[string]struct{}{}}
}

// Table returns the measurement option of the table alone.
func (s *Sets) Table() metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(s.table))
}

// Of returns the measurement option of the event type, with the error
// code when code is not empty. A type first seen once MaxTypes types are
// admitted is reported as OtherType.
func (s *Sets) Of(eventType, code string) metric.MeasurementOption {
	s.mu.RLock()
	o, ok := s.sets[s.key(eventType, code)]
	s.mu.RUnlock()
	if ok {
		return o
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, admitted := s.types[eventType]; !admitted && len(s.types) < MaxTypes {
		s.types[eventType] = struct{}{}
	}
	k := s.key(eventType, code)
	if o, ok := s.sets[k]; ok {
		return o
	}
	kv := []attribute.KeyValue{s.table, KeyEventType.String(k.eventType)}
	if code != "" {
		kv = append(kv, KeyErrorType.String(code))
	}
	o = metric.WithAttributeSet(attribute.NewSet(kv...))
	s.sets[k] = o
	return o
}

// key is the cache key of the event type and code: the type's own when
// it is admitted, OtherType's otherwise. Call it holding s.mu.
func (s *Sets) key(eventType, code string) setKey {
	if _, admitted := s.types[eventType]; !admitted {
		eventType = OtherType
	}
	return setKey{eventType, code}
}

// Tracer is a tracer that knows when a span would reach no one: when its
// provider is the API's no-op, or the global provider while the
// application has installed none. Starting a span then costs allocations
// for nothing, so its users skip it (see Off).
type Tracer struct {
	trace.Tracer
	tp trace.TracerProvider
}

// NewTracer returns the tracer of tp for pgoutbox's scope.
func NewTracer(tp trace.TracerProvider) Tracer {
	return Tracer{Tracer: tp.Tracer(Scope), tp: tp}
}

// Off reports whether a span started now would reach no one. It costs an
// atomic load and a comparison: it may be asked for every span.
func (t Tracer) Off() bool {
	switch t.tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return true
	}
	return delegateType != nil && reflect.TypeOf(t.tp) == delegateType &&
		reflect.TypeOf(otel.GetTracerProvider()) == delegateType
}

// delegateType is the type of the global TracerProvider the API returns
// before the application installs one, which forwards to the installed
// one once there is one. Nil when the API names it otherwise, or when a
// provider was installed before this package's initialisation: Off then
// never skips the global provider's spans, which costs only speed. An
// eBPF auto-instrumentation that captures spans from the global API with
// no provider installed in the program is not detected: it sees none of
// pgoutbox's spans, since none is started (docs/observability.md).
var delegateType = func() reflect.Type {
	t := reflect.TypeOf(otel.GetTracerProvider())
	if t.String() != "*global.tracerProvider" {
		return nil
	}
	return t
}()
