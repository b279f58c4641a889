package run

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/held"
)

// Events a dispatcher claimed and cannot deliver. A dispatcher that
// publishes claims events it may not be able to route: a Publisher
// without PublishTypes claims every type, and RouteFunc decides per
// event. An event whose route is empty and whose type has no handler
// (an unroutable event: during a rolling deploy, a type only the new
// replicas route) is never attempted and never dead-lettered: it is
// released, unstarted and uncharged (no attempt, no recovery, no start
// mark), PENDING again, due after a back-off (lease.ReleaseLater): a
// tenth of its age, at least UnroutableMinDelay and at most
// UnroutableMaxDelay.
//
// Why a back-off and not a claim that leaves the type out: the route is
// decided per event, not per type, so a type cannot be left out without
// delaying its routable events; and a claim that skipped such events
// would scan past every one of them that is due, a cost that grows with
// a backlog nobody delivers. With the back-off, a new event that this
// replica happens to claim first reaches a replica that routes it within
// about UnroutableMinDelay; an event no replica routes is claimed again
// less and less often (a tenth of its age), so that it costs each
// replica at most a tenth of such events' number per unit of their age.
//
// Under Ordering PerKey an unroutable head holds its key like any head
// that did not succeed: the rest of the key's run is released uncharged
// (see ordered.go) and waits for the head.
//
// Each such event is counted (Stats.Unroutable, by type in
// UnroutableByType) and each type logged at WARN at most every
// tally.WarnEvery, as events of types no running dispatcher claims are.
const (
	// UnroutableMinDelay is the least an unroutable event waits before it
	// is due again (the completer's lease.ReleaseLater).
	UnroutableMinDelay = time.Second
	// UnroutableMaxDelay is the most an unroutable event waits before it
	// is due again.
	UnroutableMaxDelay = 5 * time.Minute
)

// releaseUnroutable releases items this dispatcher claimed and cannot
// deliver (see above), counts them and logs their types.
func (r *Runner) releaseUnroutable(items []*held.Item) {
	if len(items) == 0 {
		return
	}
	r.held.GiveBack(items, held.Result{Release: true, Unroutable: true})
	byType := make(map[string]int64)
	for _, it := range items {
		byType[it.Event.Type]++
	}
	r.report.Counters.Unroutable.Add(uint64(len(items)))
	for _, typ := range r.unroutable.Add(byType, r.clock.Mono()) {
		r.cfg.Logger.Warn("pgoutbox: events of a type this dispatcher cannot deliver were left for other replicas: "+
			"RouteFunc gives them no destination and no handler is registered for the type; route the type "+
			"(and list it in PublishTypes, when set) or register a handler, or run a replica that does",
			"table", r.cfg.Table, "owner", r.cfg.Owner, "type", typ, "released", byType[typ],
			"publish_types", r.cfg.PublishTypes, "due_again_in", "a tenth of the event's age, "+
				UnroutableMinDelay.String()+" to "+UnroutableMaxDelay.String())
	}
}
