package dispatcher

import (
	"github.com/pgoutbox/pgoutbox/internal/backlog"
)

// BacklogLimit is the most due PENDING events one backlog sample counts:
// the pgoutbox.backlog.due gauge reads BacklogLimit when the backlog is
// at least that large, so that a sample reads a bounded part of the due
// index however large the backlog grows.
const BacklogLimit = backlog.Limit

// observeBacklog registers the backlog gauges' callback, and returns the
// sampler whose samples it observes (run it while Run runs) and the
// callback's unregistration (internal/backlog).
func (d *Dispatcher) observeBacklog() (s *backlog.Sampler, unregister func()) {
	m := d.report.Metrics()
	return backlog.Observe(backlog.Config{Pool: d.pool, Table: d.cfg.Table, Interval: d.cfg.BacklogSampleInterval,
		Meter: m.Meter(), Attrs: m.Table(), OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: d.clock.Mono,
		ErrorFunc: d.report.Error})
}
