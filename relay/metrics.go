package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/loglimit"
	"github.com/pgoutbox/pgoutbox/internal/telemetry"
)

// KeyGroup is the attribute of the consumer group on the relay's metrics
// and spans.
const KeyGroup = attribute.Key("pgoutbox.relay.group")

// batchReport is what the reader tells of one batch it finished (its
// cursor moved) or gave up (Err set: nothing moved).
type batchReport struct {
	// From and To are the cursor tick and the target tick.
	From, To int64
	// Events is the batch's size; Published and Parked what became of
	// them; NewKeys the keys parked by this batch; Retries the publish
	// retries spent in it.
	Events, Published, Parked, NewKeys, Retries int
	// Duration is from the read to the cursor move.
	Duration time.Duration
	// Err is why the batch was given up (its cursor did not move); nil
	// for a batch recorded.
	Err error
}

// recorder is where the services report, through hooks the wiring passes
// them as funcs (OnBatch, OnTick, OnPublish, OnError, OnHeadroom): the
// counters behind Stats, the times and samples behind Health, the
// OpenTelemetry metrics and the batch span. Its methods are safe for
// concurrent use and never block on the relay; they call the user's
// OnError and logger, so no caller may hold a lock of the relay.
type recorder struct {
	logger  *slog.Logger
	onError func(error)
	table   string
	group   string
	clock   clock.Clock

	published, parked, keysParked, batches, retries, ticks, errs atomic.Uint64

	meter                                 metric.Meter
	tableAttrs, groupAttrs                metric.MeasurementOption
	mPublished, mParked, mBatches, mTicks metric.Int64Counter
	mBatchSize, mBatchTime, mPublishTime  metric.Float64Histogram
	tracer                                telemetry.Tracer
	spanAttrs                             []attribute.KeyValue
	logLimit                              loglimit.Limiter

	mu         sync.Mutex
	lastBatch  time.Time
	lastTick   time.Time
	lastSample sample
	sampledAt  time.Time
	// sampleFailures counts the lag samples that failed in a row, since
	// sampleFailingSince; zero after one that succeeded.
	sampleFailures     int
	sampleFailingSince time.Time
	headroom           uint64
	headroomKnown      bool
	stopped            *StopError
}

// newRecorder returns the recorder of cfg (defaults applied). A metric an
// SDK refused is logged; it measures nothing.
func newRecorder(cfg Config, clk clock.Clock) *recorder {
	table := cfg.Log.String()
	r := &recorder{
		logger: cfg.Logger, onError: cfg.OnError, table: table, group: cfg.Group, clock: clk,
		meter:      cfg.MeterProvider.Meter(telemetry.Scope),
		tableAttrs: metric.WithAttributeSet(attribute.NewSet(telemetry.KeyTable.String(table))),
		groupAttrs: metric.WithAttributeSet(attribute.NewSet(telemetry.KeyTable.String(table), KeyGroup.String(cfg.Group))),
		tracer:     telemetry.NewTracer(cfg.TracerProvider),
		spanAttrs:  []attribute.KeyValue{telemetry.KeyTable.String(table), KeyGroup.String(cfg.Group)},
	}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := r.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		if c == nil {
			return noop.Int64Counter{}
		}
		return c
	}
	histogram := func(name, unit, desc string, buckets []float64) metric.Float64Histogram {
		h, err := r.meter.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		if h == nil {
			return noop.Float64Histogram{}
		}
		return h
	}
	r.mPublished = counter("pgoutbox.relay.events.published", "{event}", "Events the relay published and the broker acked")
	r.mParked = counter("pgoutbox.relay.events.parked", "{event}", "Events the relay parked with their key")
	r.mBatches = counter("pgoutbox.relay.batches", "{batch}", "Batches whose cursor move was recorded")
	r.mTicks = counter("pgoutbox.relay.ticks", "{tick}", "Ticks this relay's ticker recorded")
	r.mBatchSize = histogram("pgoutbox.relay.batch.size", "{event}", "Events per batch recorded", batchSizeBuckets)
	r.mBatchTime = histogram("pgoutbox.relay.batch.duration", "s", "From a batch's read to its cursor move",
		telemetry.DurationBuckets)
	r.mPublishTime = histogram("pgoutbox.publish.duration", "s", "Duration of Publisher.Publish calls",
		telemetry.DurationBuckets)
	if err := errors.Join(errs...); err != nil {
		r.logger.Warn("pgoutbox: relay: some metrics are not recorded", "table", table, "error", err)
	}
	return r
}

// batchSizeBuckets are the bucket bounds of pgoutbox.relay.batch.size.
var batchSizeBuckets = []float64{1, 10, 50, 100, 500, 1000, 5000, 10_000, 50_000, 100_000}

// OnBatch records one batch: counted, measured and spanned when recorded,
// reported to OnError when given up.
func (r *recorder) OnBatch(b batchReport) {
	end := r.clock.Mono()
	r.span(b, end)
	if b.Err != nil {
		r.OnError(fmt.Errorf("pgoutbox: relay: batch %d→%d given up: %w", b.From, b.To, b.Err))
		return
	}
	r.published.Add(uint64(b.Published))
	r.parked.Add(uint64(b.Parked))
	r.keysParked.Add(uint64(b.NewKeys))
	r.retries.Add(uint64(b.Retries))
	r.batches.Add(1)
	ctx := context.Background()
	r.mPublished.Add(ctx, int64(b.Published), r.groupAttrs)
	if b.Parked > 0 {
		r.mParked.Add(ctx, int64(b.Parked), r.groupAttrs)
	}
	r.mBatches.Add(ctx, 1, r.groupAttrs)
	r.mBatchSize.Record(ctx, float64(b.Events), r.groupAttrs)
	r.mBatchTime.Record(ctx, b.Duration.Seconds(), r.groupAttrs)
	r.mu.Lock()
	r.lastBatch = end
	r.mu.Unlock()
}

// span records the batch's span, pgoutbox.relay.batch, after the fact:
// started Duration before end, ended at end.
func (r *recorder) span(b batchReport, end time.Time) {
	if r.tracer.Off() {
		return
	}
	_, span := r.tracer.Start(context.Background(), "pgoutbox.relay.batch",
		trace.WithTimestamp(end.Add(-b.Duration)), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(r.spanAttrs...))
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("pgoutbox.relay.tick.from", b.From), attribute.Int64("pgoutbox.relay.tick.to", b.To),
			attribute.Int("pgoutbox.relay.batch.events", b.Events), attribute.Int("pgoutbox.relay.batch.parked", b.Parked))
		if b.Err != nil {
			span.RecordError(b.Err)
			span.SetStatus(codes.Error, "batch given up")
		}
	}
	span.End(trace.WithTimestamp(end))
}

// OnTick records a tick this relay's ticker made (the ticker's OnTick).
func (r *recorder) OnTick(int64) {
	r.ticks.Add(1)
	r.mTicks.Add(context.Background(), 1, r.tableAttrs)
	r.mu.Lock()
	r.lastTick = r.clock.Mono()
	r.mu.Unlock()
}

// OnPublish records one Publisher.Publish call of n messages that took d
// (the lanes' OnPublish).
func (r *recorder) OnPublish(_ int, d time.Duration) {
	r.mPublishTime.Record(context.Background(), d.Seconds(), r.tableAttrs)
}

// OnHeadroom records the log's head-room: how many xids the attached
// parts still hold above the current one.
func (r *recorder) OnHeadroom(xids uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headroom, r.headroomKnown = xids, true
}

// OnError counts err, passes it to OnError and logs it at WARN, at most
// once per loglimit.Interval for one error text.
func (r *recorder) OnError(err error) {
	r.errs.Add(1)
	now := r.clock.Mono()
	r.summarise(r.logLimit.Evict(now))
	msg := "pgoutbox: relay error"
	args := []any{"table", r.table, "group", r.group}
	if suppressed, ok := r.logLimit.Allow(err.Error(), now, loglimit.Held{Level: slog.LevelWarn, Msg: msg, Args: args}); ok {
		if suppressed > 0 {
			args = append(args, "repeats_not_logged", suppressed)
		}
		r.logger.Warn(msg, append(args, "error", err)...)
	}
	if r.onError != nil {
		r.onError(err)
	}
}

// flushRepeats logs one summary for each error whose repeats were held
// back: those not seen for a loglimit.Interval, or all of them with
// force (when Run ends).
func (r *recorder) flushRepeats(force bool) {
	r.summarise(r.logLimit.Due(r.clock.Mono(), force))
}

// summarise logs "similar lines suppressed" for each of held.
func (r *recorder) summarise(held []loglimit.Held) {
	for _, h := range held {
		args := append([]any{"message", h.Msg}, h.Args...)
		r.logger.Log(context.Background(), h.Level, "pgoutbox: similar lines suppressed",
			append(args, "repeats_not_logged", h.Suppressed)...)
	}
}

// groupStopped records why the group stopped, for Health.
func (r *recorder) groupStopped(e *StopError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = e
}

// sampled records a lag sample taken now.
func (r *recorder) sampled(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastSample, r.sampledAt = s, r.clock.Mono()
	r.sampleFailures, r.sampleFailingSince = 0, time.Time{}
}

// sampleFailed records a lag sample that failed now.
func (r *recorder) sampleFailed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sampleFailures == 0 {
		r.sampleFailingSince = r.clock.Mono()
	}
	r.sampleFailures++
}

// observe registers the gauges, observed from the last sample, for the
// time Run runs; call the result to unregister them. A gauge the meter
// refuses is reported to OnError, and relaying goes on without it.
func (r *recorder) observe() (unregister func()) {
	lagEvents, err1 := r.meter.Int64ObservableGauge("pgoutbox.relay.lag.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events between the group's cursor tick and the newest tick (rolled-back inserts included)"))
	lagSeconds, err2 := r.meter.Float64ObservableGauge("pgoutbox.relay.lag.seconds", metric.WithUnit("s"),
		metric.WithDescription("Age of the first tick after the group's cursor that holds events; 0 when caught up"))
	tickAge, err3 := r.meter.Float64ObservableGauge("pgoutbox.relay.tick.age", metric.WithUnit("s"),
		metric.WithDescription("Age of the log's newest tick (database clock)"))
	keys, err4 := r.meter.Int64ObservableGauge("pgoutbox.relay.keys.parked", metric.WithUnit("{key}"),
		metric.WithDescription("Keys the group has parked"))
	headroom, err5 := r.meter.Int64ObservableGauge("pgoutbox.relay.parts.headroom_xids", metric.WithUnit("{xid}"),
		metric.WithDescription("Transaction ids the log's attached parts still hold above the current one"))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		r.OnError(fmt.Errorf("pgoutbox: relay: gauges not registered: %w", err))
		return func() {}
	}
	reg, err := r.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r.mu.Lock()
		s, ok, room, roomOK := r.lastSample, !r.sampledAt.IsZero(), r.headroom, r.headroomKnown
		r.mu.Unlock()
		if ok {
			o.ObserveInt64(lagEvents, s.LagEvents, r.groupAttrs)
			o.ObserveFloat64(lagSeconds, s.LagSeconds, r.groupAttrs)
			o.ObserveFloat64(tickAge, s.TickAge.Seconds(), r.tableAttrs)
			o.ObserveInt64(keys, s.KeysParked, r.groupAttrs)
		}
		if roomOK {
			o.ObserveInt64(headroom, int64(min(room, 1<<62)), r.tableAttrs)
		}
		return nil
	}, lagEvents, lagSeconds, tickAge, keys, headroom)
	if err != nil {
		r.OnError(fmt.Errorf("pgoutbox: relay: gauges not registered: %w", err))
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// sampleInterval is the time between two lag samples while Run runs.
const sampleInterval = time.Second

// sampler returns the service that samples the lag every interval
// through read, each sample bounded by timeout.
func (r *recorder) sampler(read func(context.Context) (sample, error), every, timeout time.Duration) service {
	return service{name: "lag sampler", run: func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			s, err := read(sctx)
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.sampleFailed()
				r.OnError(fmt.Errorf("pgoutbox: relay: lag sample: %w", err))
			default:
				r.sampled(s)
			}
			r.flushRepeats(false)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}}
}
