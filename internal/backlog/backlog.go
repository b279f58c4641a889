package backlog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Limit is the most due PENDING events one backlog sample counts:
// the pgoutbox.backlog.due gauge reads Limit when the backlog is
// at least that large, so that a sample reads a bounded part of the due
// index however large the backlog grows.
const Limit = 10_000

// Config is what the sampler needs.
type Config struct {
	// Pool runs the sample's query.
	Pool *pgxpool.Pool
	// Table is the outbox table.
	Table outbox.Table
	// Interval is how long a sample serves the collections before a
	// collection asks for a new one.
	Interval time.Duration
	// Meter registers the gauges; Attrs are their attributes (the table).
	Meter metric.Meter
	Attrs metric.MeasurementOption
	// OpTimeout bounds the sample's query, as each of the dispatcher's own
	// statements is bounded.
	OpTimeout time.Duration
	// Now is the clock that ages the samples.
	Now func() time.Time
	// ErrorFunc reports a gauge not registered or a sample that failed
	// (msg says which).
	ErrorFunc func(msg string, err error)
}

// Sampler keeps the last sample of the backlog gauges. A
// goroutine of the dispatcher's Run takes the samples (Run); the
// MeterProvider's callback only reads the last one and asks for a new one,
// so that a collection never waits for the database.
type Sampler struct {
	cfg    Config
	sql    string
	wanted chan struct{} // a collection asked for a sample
	mu     sync.Mutex
	at     time.Time // when the last sample was taken; zero before
	due    int64
	oldest float64 // seconds; 0 when nothing is due
	ok     bool    // the last sample succeeded
}

// backlogSQL counts the due PENDING events up to Limit and reads
// the oldest due time, from the due index (the one the claim uses): a
// LIMIT-bounded index scan and the index's first entry, in the order of
// the index (a min() may be planned as a bitmap scan of every due row),
// never a scan of the table. While the backlog is only a few times
// Limit the planner may prefer a bitmap scan of every due row;
// past that, the ordered index scan stops at the limit.
const backlogSQL = `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, seq LIMIT %[2]d) due),
	coalesce(extract(epoch FROM now() - (SELECT next_attempt_at FROM %[1]s
		WHERE status = 'PENDING' AND next_attempt_at <= now() ORDER BY next_attempt_at, seq LIMIT 1))::float8, 0)`

// Query is the sample's query on the table of names.
func Query(names sqlname.Names) string {
	return fmt.Sprintf(backlogSQL, names.Qualified, Limit)
}

// Observe registers the backlog gauges' callback, and returns the
// sampler whose samples it observes (run it while the dispatcher runs) and
// the callback's unregistration.
func Observe(cfg Config) (s *Sampler, unregister func()) {
	s = &Sampler{cfg: cfg, wanted: make(chan struct{}, 1)}
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return s, func() {}
	}
	s.sql = Query(names)
	meter := cfg.Meter
	due, err1 := meter.Int64ObservableGauge("pgoutbox.backlog.due", metric.WithUnit("{event}"),
		metric.WithDescription(fmt.Sprintf("Due PENDING events in the table, sampled, at most %d", Limit)))
	age, err2 := meter.Float64ObservableGauge("pgoutbox.backlog.oldest_due_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due PENDING event has been due, sampled"))
	reg, err3 := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if n, oldest, ok := s.last(); ok {
			o.ObserveInt64(due, n, cfg.Attrs)
			o.ObserveFloat64(age, oldest, cfg.Attrs)
		}
		return nil
	}, due, age)
	if err := firstError(err1, err2, err3); err != nil {
		cfg.ErrorFunc("backlog gauges not registered", fmt.Errorf("metrics: %w", err))
		return s, func() {}
	}
	return s, func() { _ = reg.Unregister() }
}

// firstError returns the first of errs that is not nil, or nil.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// last returns the last sample, and asks Run for a new one when it is
// older than the interval. It never waits for the database.
func (s *Sampler) last() (due int64, oldest float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || s.cfg.Now().Sub(s.at) >= s.cfg.Interval {
		select {
		case s.wanted <- struct{}{}:
		default:
		}
	}
	return s.due, s.oldest, s.ok
}

// Run takes a sample each time a collection asks for one, until quit
// ends. Only collections ask: with no MeterProvider collecting, it never
// queries. A failed sample is reported to ErrorFunc and observes nothing
// until the next one.
func (s *Sampler) Run(quit context.Context) {
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
			s.cfg.ErrorFunc("backlog sample failed", errtext.Wrap(err, "dispatcher: backlog sample"))
		}
	}
}

// take queries a new sample, bounded like the dispatcher's own
// statements, unless the last one is younger than the interval.
func (s *Sampler) take(quit context.Context) error {
	s.mu.Lock()
	fresh := !s.at.IsZero() && s.cfg.Now().Sub(s.at) < s.cfg.Interval
	s.mu.Unlock()
	if fresh {
		return nil
	}
	ctx, cancel := context.WithTimeout(quit, s.cfg.OpTimeout)
	defer cancel()
	var due int64
	var oldest float64
	err := s.cfg.Pool.QueryRow(ctx, s.sql).Scan(&due, &oldest)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at, s.due, s.oldest, s.ok = s.cfg.Now(), due, oldest, err == nil
	return err
}
