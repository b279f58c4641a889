package dispatcher

import (
	"github.com/pgoutbox/pgoutbox/internal/backlog"
)

// BacklogLimit is the most due PENDING events one backlog sample counts:
// the pgoutbox.backlog.due gauge reads BacklogLimit when the backlog is
// at least that large, so that a sample reads a bounded part of the due
// index however large the backlog grows.
const BacklogLimit = backlog.Limit

// observe registers the dispatcher's gauges for the time Run runs: the
// backlog gauges (internal/backlog: it returns the sampler whose samples
// they observe, to run meanwhile), the circuit's state (with a
// Publisher), the calls running past their timeout and the replicas of
// another mode heard. unregister unregisters them all.
func (d *Dispatcher) observe() (s *backlog.Sampler, unregister func()) {
	m := d.report.Metrics()
	s, backlogOff := backlog.Observe(backlog.Config{Pool: d.pool, Table: d.cfg.Table, Interval: d.cfg.BacklogSampleInterval,
		Meter: m.Meter(), Attrs: m.Table(), OpTimeout: opTimeout(d.cfg.LeaseDuration), Now: d.clock.Mono,
		ErrorFunc: d.report.Error})
	offs := []func(){backlogOff, d.greeter.Observe(),
		d.report.ObserveGauge("pgoutbox.handlers.overrunning", "{call}",
			"Handler and publish calls running past their timeout now, ignoring their cancelled context",
			func() int64 { n, _ := d.held.Overrunning(d.clock.Mono()); return int64(n) })}
	if d.cfg.Publisher != nil {
		offs = append(offs, d.report.ObserveGauge("pgoutbox.circuit.state", "1",
			"State of the publisher's circuit: 0 closed, 1 open, 2 probing",
			func() int64 { state, _ := d.circuit.Snapshot(); return int64(state) }))
	}
	return s, func() {
		for _, off := range offs {
			off()
		}
	}
}
