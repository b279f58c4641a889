package dispatcher

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgoutbox/pgoutbox/internal/backlog"
	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// BacklogLimit is the most due PENDING events one backlog sample counts:
// the pgoutbox.backlog.due gauge reads BacklogLimit when the backlog is
// at least that large, so that a sample reads a bounded part of the due
// index however large the backlog grows.
const BacklogLimit = backlog.Limit

// instruments are a dispatcher's metrics and spans.
type instruments struct {
	metrics *metrics
	spans   spans
}

// newInstruments creates the instruments of cfg's providers. A metric an
// SDK refused is logged; it measures nothing.
func newInstruments(cfg Config, r *reporter) *instruments {
	m, err := newMetrics(cfg, &r.stats)
	if err != nil {
		r.logger.Warn("pgoutbox: some metrics are not recorded", "table", r.table, "error", err)
	}
	return &instruments{metrics: m, spans: spans{tracer: telemetry.NewTracer(cfg.TracerProvider)}}
}

// metrics are the dispatcher's OpenTelemetry instruments (see
// docs/observability.md). With no MeterProvider installed they are the
// API's no-ops, and every measurement uses a cached attribute set.
type metrics struct {
	sets                            *telemetry.Sets
	table                           metric.MeasurementOption
	sent, retried, snoozed, failed  metric.Int64Counter
	handlerTime, publishTime, delay metric.Float64Histogram
	meter                           metric.Meter
}

// counterNames name the metered Stats counters, whose attributes are the
// table alone. (Retention's deleted rows are metered too, with their
// status: see newMetrics.)
func counterNames(c *counters) map[string]*metered {
	return map[string]*metered{
		"pgoutbox.events.claimed":         &c.claimed,
		"pgoutbox.events.lock_lost":       &c.lockLost,
		"pgoutbox.events.outcome_unknown": &c.outcomeUnknown,
		"pgoutbox.events.recovered":       &c.recovered,
		"pgoutbox.events.released":        &c.released,
		"pgoutbox.events.order_released":  &c.orderReleased,
		"pgoutbox.events.overrun":         &c.overruns,
	}
}

// newMetrics creates the instruments of cfg.MeterProvider and attaches
// those of the table-wide counters to c. The API's instruments never fail
// to be created; an error (a name an SDK refuses) leaves a working no-op
// (the API's, when the SDK gave none) and is returned for the log.
func newMetrics(cfg Config, c *counters) (*metrics, error) {
	meter := cfg.MeterProvider.Meter(telemetry.Scope)
	sets := telemetry.NewSets(cfg.Table.String())
	m := &metrics{sets: sets, table: sets.Table(), meter: meter}
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		ctr, err := meter.Int64Counter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		if ctr == nil {
			return noop.Int64Counter{}
		}
		return ctr
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		if h == nil {
			return noop.Float64Histogram{}
		}
		return h
	}
	for name, mc := range counterNames(c) {
		mc.m, mc.attrs = counter(name, "Events "+name[len("pgoutbox.events."):]+" by this dispatcher"), []metric.AddOption{m.table}
	}
	deleted := counter("pgoutbox.events.deleted", "Finished rows the retention job deleted, by pgoutbox.status")
	for status, mc := range map[outbox.Status]*metered{outbox.StatusSent: &c.retentionSent, outbox.StatusFailed: &c.retentionFailed} {
		mc.m, mc.attrs = deleted, []metric.AddOption{metric.WithAttributes(
			telemetry.KeyTable.String(cfg.Table.String()), attribute.String("pgoutbox.status", string(status)))}
	}
	errs = append(errs, circuitCounters(meter, c, m.table))
	m.sent = counter("pgoutbox.events.sent", "Events that became SENT (or were deleted on success)")
	m.retried = counter("pgoutbox.events.retried", "Failed attempts scheduled for a retry, by error.type")
	m.snoozed = counter("pgoutbox.events.snoozed", "Attempts a handler gave back with outbox.Snooze")
	m.failed = counter("pgoutbox.events.failed", "Events that became FAILED, by error.type")
	m.handlerTime = histogram("pgoutbox.handler.duration", "Duration of handler calls", telemetry.DurationBuckets)
	m.publishTime = histogram("pgoutbox.publish.duration", "Duration of Publisher.Publish calls", telemetry.DurationBuckets)
	m.delay = histogram("pgoutbox.event.start_delay",
		"From an event's created_at (database clock) to the start of its first attempt (local clock)", telemetry.LatencyBuckets)
	return m, joinErrors(errs)
}

func joinErrors(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// completed counts an outcome the completer recorded as SENT or PENDING
// (FAILED ones are counted by failedOne, with recovery's).
func (m *metrics) completed(it *item, status outbox.Status) {
	ctr, code := m.retried, it.result.code
	switch {
	case status == outbox.StatusSent:
		ctr, code = m.sent, ""
	case it.result.snooze:
		ctr, code = m.snoozed, ""
	}
	if ctx := context.Background(); ctr.Enabled(ctx) {
		ctr.Add(ctx, 1, m.sets.Of(it.event.Type, string(code)))
	}
}

// failedOne counts an event that became FAILED.
func (m *metrics) failedOne(o Outcome) {
	m.failed.Add(context.Background(), 1, m.sets.Of(o.Event.Type, string(o.Code)))
}

// started records the start delay of an item's first attempt: from its
// created_at, the database's now() in the emitting transaction (which is
// when that transaction began, not when it committed), to its startedAt
// on the local clock. Clock skew between the two shows up in it; a negative
// delay is recorded as zero. Retries and snoozed events are left out:
// their delay is the backoff's; so are suspects (recovered before: their
// first attempt started already, and was lost).
func (m *metrics) started(it *item) {
	e := it.event
	if e.Attempt != 1 || e.Snoozes != 0 || it.suspect || e.CreatedAt.IsZero() || !m.delay.Enabled(context.Background()) {
		return
	}
	m.delay.Record(context.Background(), max(0, it.startedAt.Sub(e.CreatedAt)).Seconds(), m.sets.Of(e.Type, ""))
}

// handled records the duration of an item's handler call, which ended
// with res.
func (m *metrics) handled(it *item, res result) {
	if !m.handlerTime.Enabled(context.Background()) {
		return
	}
	took := res.ran
	if took == 0 {
		took = time.Since(it.startedAt)
	}
	m.handlerTime.Record(context.Background(), took.Seconds(), m.sets.Of(it.event.Type, string(res.code)))
}

// published records the duration of one Publish call.
func (m *metrics) published(took time.Duration) {
	m.publishTime.Record(context.Background(), took.Seconds(), m.table)
}

// metered is a Stats counter that adds to an OpenTelemetry counter too.
type metered struct {
	atomicCounter
	m     metric.Int64Counter // nil until newMetrics attaches one
	attrs []metric.AddOption  // allocated once: a variadic argument escapes
}

// Add adds n to the Stats counter and to its metric, and returns the new
// value of the Stats counter.
func (c *metered) Add(n uint64) uint64 {
	if c.m != nil {
		c.m.Add(context.Background(), int64(n), c.attrs...)
	}
	return c.atomicCounter.Add(n)
}

// observeBacklog registers the backlog gauges' callback, and returns the
// sampler whose samples it observes (run it while Run runs) and the
// callback's unregistration (internal/backlog).
func (d *Dispatcher) observeBacklog() (s *backlog.Sampler, unregister func()) {
	return backlog.Observe(backlog.Config{Pool: d.pool, Table: d.cfg.Table, Interval: d.cfg.BacklogSampleInterval,
		Meter: d.metrics.meter, Attrs: d.metrics.table, OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: time.Now,
		ErrorFunc: d.reportError})
}

// observeGauge registers the int64 gauge name (with the table attribute),
// whose value is read at each collection, while Run runs; call the result
// to unregister it. A gauge the meter refuses is reported to OnError and
// the log, and dispatching goes on without it.
func (d *Dispatcher) observeGauge(name, unit, description string, value func() int64) (unregister func()) {
	meter := d.metrics.meter
	gauge, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(description))
	if err == nil {
		var reg metric.Registration
		reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(gauge, value(), d.metrics.table)
			return nil
		}, gauge)
		if err == nil {
			return func() { _ = reg.Unregister() }
		}
	}
	d.reportError(name+" gauge not registered", fmt.Errorf("metrics: %w", err))
	return func() {}
}
