package dispatcher

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/tally"
)

// Which events a dispatcher claims. A dispatcher delivers only what it
// can deliver, so that replicas of different versions (a rolling deploy)
// and services that share one table never dead-letter each other's
// events:
//
//   - a catch-all dispatcher claims every type: one with a DefaultHandler,
//     or a Publisher without PublishTypes (its router publishes every
//     type it gives a destination, and the events it gives none, with no
//     handler, are released for other replicas: see internal/run/unroutable.go);
//   - any other claims only its handlers' types (Handle) and, with a
//     Publisher, its PublishTypes, with a claim that reads only those
//     types' rows (see internal/lease: a backlog of other types costs it
//     nothing).
//
// The set is fixed when Run starts (Handle is refused after). An event
// of a type no running dispatcher claims stays PENDING: every
// RecoverEvery-th poll a dispatcher that is not a catch-all counts the
// events of the types it does not claim that have been due for
// waitingDueFor, reports them in Stats (WaitingUnhandled) and logs a
// WARN per type at most every tally.WarnEvery. One count looks at
// tally.MaxTypes distinct PENDING types at the most, the dispatcher's own
// included.
const (
	// waitingPerType bounds the events counted per type.
	waitingPerType = 1000
	// minWaitingDueFor is the least time an event of a type this
	// dispatcher does not claim must have been due to count as waiting:
	// a replica that claims it normally does well within it.
	minWaitingDueFor = time.Minute
)

// kinds is what a dispatcher claims and publishes, and what it saw
// waiting.
type kinds struct {
	// publish is Config.PublishTypes as a set; nil when unset (the
	// router decides for every type).
	publish map[string]bool
	// all and types are what the dispatcher claims, set when Run starts:
	// every type, or types (sorted, never nil).
	all   bool
	types []string

	waiting tally.Waiting
}

// publishSet is Config.PublishTypes as a set; nil when unset.
func publishSet(cfg Config) map[string]bool {
	if len(cfg.PublishTypes) == 0 {
		return nil
	}
	set := make(map[string]bool, len(cfg.PublishTypes))
	for _, t := range cfg.PublishTypes {
		set[t] = true
	}
	return set
}

// claimTypes is the Types of the next claim: nil for every type.
func (k *kinds) claimTypes() []string {
	if k.all {
		return nil
	}
	return k.types
}

// ClaimedTypes returns the event types the dispatcher claims, sorted, or
// all = true (and no types) when it claims events of every type: it has a
// DefaultHandler, or a Publisher without PublishTypes. Otherwise it
// claims the types registered with Handle and, with a Publisher, those
// in PublishTypes; events of other types are left PENDING for the
// dispatchers that claim them. Before Run it reflects the handlers
// registered so far; from Run on it is fixed.
func (d *Dispatcher) ClaimedTypes() (types []string, all bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.defaultHandler != nil || d.cfg.Publisher != nil && d.kinds.publish == nil {
		return nil, true
	}
	set := maps.Clone(d.kinds.publish)
	if d.cfg.Publisher == nil || set == nil {
		set = map[string]bool{}
	}
	for t := range d.handlers {
		set[t] = true
	}
	return append([]string{}, slices.Sorted(maps.Keys(set))...), false
}

// fixClaimedTypes sets what the claims take, once Run has started (no
// Handle call succeeds after), and logs it.
func (d *Dispatcher) fixClaimedTypes() {
	d.kinds.types, d.kinds.all = d.ClaimedTypes()
	switch {
	case d.kinds.all:
		d.cfg.Logger.Info("pgoutbox: dispatcher claims events of every type", "table", d.cfg.Table.String())
	case len(d.kinds.types) == 0:
		d.cfg.Logger.Warn("pgoutbox: dispatcher claims no event type: register handlers with Handle, "+
			"or set DefaultHandler or a Publisher", "table", d.cfg.Table.String())
	default:
		d.cfg.Logger.Info("pgoutbox: dispatcher claims events of its types only", "table", d.cfg.Table.String(),
			"types", d.kinds.types)
	}
}

// waitingDueFor is how long an event of a type this dispatcher does not
// claim must have been due to count as waiting: a minute, or two idle
// poll intervals when longer.
func (d *Dispatcher) waitingDueFor() time.Duration {
	return max(minWaitingDueFor, 2*d.cfg.IdlePollInterval)
}

// checkWaiting counts the events of types this dispatcher does not claim
// that have waited past waitingDueFor, keeps the counts for Stats and
// logs the types not logged in the last tally.WarnEvery. A catch-all
// claims every type and has nothing to count.
func (d *Dispatcher) checkWaiting(stop context.Context) {
	if d.kinds.all {
		return
	}
	ctx, cancel := d.opContextFrom(stop)
	defer cancel()
	dueFor := d.waitingDueFor()
	counts, err := d.store.Waiting(ctx, d.pool, lease.WaitingParams{
		Except: d.kinds.types, DueFor: dueFor, PerType: waitingPerType, MaxTypes: tally.MaxTypes,
	})
	if err != nil {
		if stop.Err() == nil {
			d.report.Error("count of events waiting for a type this dispatcher does not claim failed", err)
		}
		return
	}
	for _, c := range d.kinds.waiting.Update(counts, d.clock.Mono()) {
		d.cfg.Logger.Warn("pgoutbox: events of a type this dispatcher does not claim have waited long; "+
			"no dispatcher that claims it may be running, or it is behind", "table", d.cfg.Table.String(), "owner", d.cfg.Owner, "type", c.Type,
			"waiting", c.Count, "at_least", c.Count >= waitingPerType, "due_for_more_than", dueFor.String())
	}
}
