package report

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/telemetry"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Metrics are the dispatcher's OpenTelemetry instruments (see
// docs/observability.md). With no MeterProvider installed they are the
// API's no-ops, and every measurement uses a cached attribute set.
type Metrics struct {
	sets                            *telemetry.Sets
	table                           metric.MeasurementOption
	sent, retried, snoozed, failed  metric.Int64Counter
	handlerTime, publishTime, delay metric.Float64Histogram
	meter                           metric.Meter
	clock                           clock.Clock // measures by Mono
}

// counterNames name the metered Stats counters, whose attributes are the
// table alone. (Retention's deleted rows are metered too, with their
// status: see newMetrics.)
func counterNames(c *Counters) map[string]*Metered {
	return map[string]*Metered{
		"pgoutbox.events.claimed":         &c.Claimed,
		"pgoutbox.events.lock_lost":       &c.LockLost,
		"pgoutbox.events.outcome_unknown": &c.OutcomeUnknown,
		"pgoutbox.events.recovered":       &c.Recovered,
		"pgoutbox.events.released":        &c.Released,
		"pgoutbox.events.order_released":  &c.OrderReleased,
		"pgoutbox.events.overrun":         &c.Overruns,
	}
}

// newMetrics creates the instruments of cfg.MeterProvider and attaches
// those of the table-wide counters to c. The API's instruments never fail
// to be created; an error (a name an SDK refuses) leaves a working no-op
// (the API's, when the SDK gave none) and is returned for the log.
func newMetrics(cfg Config, c *Counters) (*Metrics, error) {
	meter := cfg.MeterProvider.Meter(telemetry.Scope)
	sets := telemetry.NewSets(cfg.Table)
	m := &Metrics{sets: sets, table: sets.Table(), meter: meter, clock: cfg.Clock}
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
	for status, mc := range map[outbox.Status]*Metered{outbox.StatusSent: &c.RetentionSent, outbox.StatusFailed: &c.RetentionFailed} {
		mc.m, mc.attrs = deleted, []metric.AddOption{metric.WithAttributes(
			telemetry.KeyTable.String(cfg.Table), attribute.String("pgoutbox.status", string(status)))}
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
	return m, JoinErrors(errs)
}

// circuitCounters attaches the circuit's counters to their metrics:
// pgoutbox.circuit.opens and pgoutbox.events.outage_returned.
func circuitCounters(meter metric.Meter, c *Counters, table metric.MeasurementOption) error {
	opens, err1 := meter.Int64Counter("pgoutbox.circuit.opens", metric.WithUnit("{open}"),
		metric.WithDescription("Times the publisher's circuit opened (from closed)"))
	returned, err2 := meter.Int64Counter("pgoutbox.events.outage_returned", metric.WithUnit("{event}"),
		metric.WithDescription("Events returned to PENDING without an attempt because the publisher was unavailable"))
	if opens != nil {
		c.CircuitOpens.m, c.CircuitOpens.attrs = opens, []metric.AddOption{table}
	}
	if returned != nil {
		c.OutageReturned.m, c.OutageReturned.attrs = returned, []metric.AddOption{table}
	}
	return JoinErrors([]error{err1, err2})
}

// JoinErrors returns the first of errs that is not nil, as a metrics
// error; nil when all are.
func JoinErrors(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// Meter returns the meter the instruments were created with, for gauges
// of the dispatcher's own.
func (m *Metrics) Meter() metric.Meter { return m.meter }

// Table returns the attribute set of the table alone, allocated once.
func (m *Metrics) Table() metric.MeasurementOption { return m.table }

// Completed counts an outcome the completer recorded as SENT or PENDING
// (a retry with code, or a snooze) for an event of eventType (FAILED
// ones are counted by FailedOne, with recovery's).
func (m *Metrics) Completed(eventType string, status outbox.Status, snooze bool, code outbox.Code) {
	ctr := m.retried
	switch {
	case status == outbox.StatusSent:
		ctr, code = m.sent, ""
	case snooze:
		ctr, code = m.snoozed, ""
	}
	if ctx := context.Background(); ctr.Enabled(ctx) {
		ctr.Add(ctx, 1, m.sets.Of(eventType, string(code)))
	}
}

// FailedOne counts an event of eventType that became FAILED with code.
func (m *Metrics) FailedOne(eventType string, code outbox.Code) {
	m.failed.Add(context.Background(), 1, m.sets.Of(eventType, string(code)))
}

// Started records the start delay of an event's first attempt: from its
// created_at, the database's now() in the emitting transaction (which is
// when that transaction began, not when it committed), to startedAt
// on the local clock. Clock skew between the two shows up in it; a negative
// delay is recorded as zero. Retries and snoozed events are left out:
// their delay is the backoff's; so are suspects (recovered before: their
// first attempt started already, and was lost).
func (m *Metrics) Started(e *outbox.Event, suspect bool, startedAt time.Time) {
	if e.Attempt != 1 || e.Snoozes != 0 || suspect || e.CreatedAt.IsZero() || !m.delay.Enabled(context.Background()) {
		return
	}
	m.delay.Record(context.Background(), max(0, startedAt.Sub(e.CreatedAt)).Seconds(), m.sets.Of(e.Type, ""))
}

// Handled records the duration of a handler call for an event of
// eventType, which ended with code: ran when the call measured it, else
// the time since startedAt.
func (m *Metrics) Handled(eventType string, startedAt time.Time, ran time.Duration, code outbox.Code) {
	if !m.handlerTime.Enabled(context.Background()) {
		return
	}
	took := ran
	if took == 0 {
		took = m.clock.Elapsed(startedAt)
	}
	m.handlerTime.Record(context.Background(), took.Seconds(), m.sets.Of(eventType, string(code)))
}

// Published records the duration of one Publish call.
func (m *Metrics) Published(took time.Duration) {
	m.publishTime.Record(context.Background(), took.Seconds(), m.table)
}

// ObserveGauge registers the int64 gauge name (with the table attribute),
// whose value is read at each collection; call the result to unregister
// it. A gauge the meter refuses is reported to OnError and the log, and
// dispatching goes on without it.
func (r *Reporter) ObserveGauge(name, unit, description string, value func() int64) (unregister func()) {
	meter := r.metrics.meter
	gauge, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(description))
	if err == nil {
		var reg metric.Registration
		reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(gauge, value(), r.metrics.table)
			return nil
		}, gauge)
		if err == nil {
			return func() { _ = reg.Unregister() }
		}
	}
	r.Error(name+" gauge not registered", fmt.Errorf("metrics: %w", err))
	return func() {}
}
