package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// BacklogLimit is the most due PENDING events one backlog sample counts:
// the pgoutbox.backlog.due gauge reads BacklogLimit when the backlog is
// at least that large, so that a sample reads a bounded part of the due
// index however large the backlog grows.
const BacklogLimit = 10_000

// backlogSampler keeps the last sample of the backlog gauges. A
// goroutine of Run's takes the samples (run); the MeterProvider's
// callback only reads the last one and asks for a new one, so that a
// collection never waits for the database.
type backlogSampler struct {
	d        *Dispatcher
	sql      string
	interval time.Duration
	wanted   chan struct{} // a collection asked for a sample
	mu       sync.Mutex
	at       time.Time // when the last sample was taken; zero before
	due      int64
	oldest   float64 // seconds; 0 when nothing is due
	ok       bool    // the last sample succeeded
}

// backlogSQL counts the due PENDING events up to BacklogLimit and reads
// the oldest due time, from the due index (the one the claim uses): a
// LIMIT-bounded index scan and the index's first entry, in the order of
// the index (a min() may be planned as a bitmap scan of every due row),
// never a scan of the table. While the backlog is only a few times
// BacklogLimit the planner may prefer a bitmap scan of every due row;
// past that, the ordered index scan stops at the limit.
const backlogSQL = `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, seq LIMIT %[2]d) due),
	coalesce(extract(epoch FROM now() - (SELECT next_attempt_at FROM %[1]s
		WHERE status = 'PENDING' AND next_attempt_at <= now() ORDER BY next_attempt_at, seq LIMIT 1))::float8, 0)`

func backlogQuery(names sqlname.Names) string {
	return fmt.Sprintf(backlogSQL, names.Qualified, BacklogLimit)
}

// observeBacklog registers the backlog gauges' callback, and returns the
// sampler whose samples it observes (run it while Run runs) and the
// callback's unregistration.
func (d *Dispatcher) observeBacklog() (s *backlogSampler, unregister func()) {
	s = &backlogSampler{d: d, interval: d.cfg.BacklogSampleInterval, wanted: make(chan struct{}, 1)}
	names, err := sqlname.For(d.cfg.Table)
	if err != nil {
		return s, func() {}
	}
	s.sql = backlogQuery(names)
	meter := d.report.Metrics().Meter()
	due, err1 := meter.Int64ObservableGauge("pgoutbox.backlog.due", metric.WithUnit("{event}"),
		metric.WithDescription(fmt.Sprintf("Due PENDING events in the table, sampled, at most %d", BacklogLimit)))
	age, err2 := meter.Float64ObservableGauge("pgoutbox.backlog.oldest_due_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due PENDING event has been due, sampled"))
	reg, err3 := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if n, oldest, ok := s.last(); ok {
			o.ObserveInt64(due, n, d.report.Metrics().Table())
			o.ObserveFloat64(age, oldest, d.report.Metrics().Table())
		}
		return nil
	}, due, age)
	if err := report.JoinErrors([]error{err1, err2, err3}); err != nil {
		d.report.Error("backlog gauges not registered", err)
		return s, func() {}
	}
	return s, func() { _ = reg.Unregister() }
}

// last returns the last sample, and asks run for a new one when it is
// older than the interval. It never waits for the database.
func (s *backlogSampler) last() (due int64, oldest float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || time.Since(s.at) >= s.interval {
		signal(s.wanted)
	}
	return s.due, s.oldest, s.ok
}

// run takes a sample each time a collection asks for one, until quit
// ends. Only collections ask: with no MeterProvider collecting, it never
// queries. A failed sample is reported to OnError and observes nothing
// until the next one.
func (s *backlogSampler) run(quit context.Context) {
	if s.sql == "" {
		return
	}
	for {
		select {
		case <-quit.Done():
			return
		case <-s.wanted:
		}
		if err := s.take(quit); err != nil && quit.Err() == nil {
			s.d.report.Error("backlog sample failed", errtext.Wrap(err, "dispatcher: backlog sample"))
		}
	}
}

// take queries a new sample, bounded like the dispatcher's own
// statements, unless the last one is younger than the interval.
func (s *backlogSampler) take(quit context.Context) error {
	s.mu.Lock()
	fresh := !s.at.IsZero() && time.Since(s.at) < s.interval
	s.mu.Unlock()
	if fresh {
		return nil
	}
	ctx, cancel := s.d.opContextFrom(quit)
	defer cancel()
	var due int64
	var oldest float64
	err := s.d.pool.QueryRow(ctx, s.sql).Scan(&due, &oldest)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at, s.due, s.oldest, s.ok = time.Now(), due, oldest, err == nil
	return err
}
