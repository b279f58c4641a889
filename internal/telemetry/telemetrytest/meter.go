// Package telemetrytest gives tests a MeterProvider that keeps what it
// is given, built on the OpenTelemetry metric API alone (the core module
// requires no SDK).
package telemetrytest

import (
	"context"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"
)

// MeterProvider records every measurement of its counters and histograms
// and, on Collect, the observations of its registered callbacks. Other
// instruments are no-ops. It is safe for concurrent use.
type MeterProvider struct {
	noop.MeterProvider
	mu        sync.Mutex
	points    []Point
	callbacks map[*registration]metric.Callback
}

// Point is one measurement or observation.
type Point struct {
	Name  string
	Value float64
	Attrs attribute.Set
}

// Meter returns a meter of the provider.
func (p *MeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return meter{p: p} }

func (p *MeterProvider) add(name string, v float64, attrs attribute.Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.points = append(p.points, Point{Name: name, Value: v, Attrs: attrs})
}

// Points returns the points of the named instrument whose attributes
// include every kv.
func (p *MeterProvider) Points(name string, kv ...attribute.KeyValue) []Point {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Point
	for _, pt := range p.points {
		if pt.Name == name && !slices.ContainsFunc(kv, func(want attribute.KeyValue) bool {
			got, ok := pt.Attrs.Value(want.Key)
			return !ok || got != want.Value
		}) {
			out = append(out, pt)
		}
	}
	return out
}

// Sum is the sum of the values of Points(name, kv...).
func (p *MeterProvider) Sum(name string, kv ...attribute.KeyValue) float64 {
	var sum float64
	for _, pt := range p.Points(name, kv...) {
		sum += pt.Value
	}
	return sum
}

// Collect runs the registered callbacks, recording their observations as
// points.
func (p *MeterProvider) Collect(ctx context.Context) error {
	p.mu.Lock()
	cbs := make([]metric.Callback, 0, len(p.callbacks))
	for _, cb := range p.callbacks {
		cbs = append(cbs, cb)
	}
	p.mu.Unlock()
	for _, cb := range cbs {
		if err := cb(ctx, observer{p: p}); err != nil {
			return err
		}
	}
	return nil
}

// Callbacks is the number of callbacks registered and not unregistered.
func (p *MeterProvider) Callbacks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.callbacks)
}

type meter struct {
	noop.Meter
	p *MeterProvider
}

func (m meter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return int64Counter{name: name, p: m.p}, nil
}

func (m meter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return float64Histogram{name: name, p: m.p}, nil
}

func (m meter) Int64ObservableGauge(name string, _ ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	return int64Gauge{name: name}, nil
}

func (m meter) Float64ObservableGauge(name string, _ ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	return float64Gauge{name: name}, nil
}

func (m meter) RegisterCallback(f metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	r := &registration{p: m.p}
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	if m.p.callbacks == nil {
		m.p.callbacks = map[*registration]metric.Callback{}
	}
	m.p.callbacks[r] = f
	return r, nil
}

type registration struct {
	embedded.Registration
	p *MeterProvider
}

func (r *registration) Unregister() error {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	delete(r.p.callbacks, r)
	return nil
}

type int64Counter struct {
	noop.Int64Counter
	name string
	p    *MeterProvider
}

func (c int64Counter) Enabled(context.Context) bool { return true }

func (c int64Counter) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	c.p.add(c.name, float64(v), metric.NewAddConfig(opts).Attributes())
}

type float64Histogram struct {
	noop.Float64Histogram
	name string
	p    *MeterProvider
}

func (h float64Histogram) Enabled(context.Context) bool { return true }

func (h float64Histogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	h.p.add(h.name, v, metric.NewRecordConfig(opts).Attributes())
}

type int64Gauge struct {
	noop.Int64ObservableGauge
	name string
}

type float64Gauge struct {
	noop.Float64ObservableGauge
	name string
}

type observer struct {
	noop.Observer
	p *MeterProvider
}

func (o observer) ObserveInt64(inst metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	if g, ok := inst.(int64Gauge); ok {
		o.p.add(g.name, float64(v), metric.NewObserveConfig(opts).Attributes())
	}
}

func (o observer) ObserveFloat64(inst metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	if g, ok := inst.(float64Gauge); ok {
		o.p.add(g.name, v, metric.NewObserveConfig(opts).Attributes())
	}
}
