package claim

import (
	"context"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
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
	// circuit is what the circuit needs of them (circuitTypes), set with
	// them: every claim and due-time check passes it.
	circuit circuit.Types

	waiting tally.Waiting
}

// PublishSet is PublishTypes as a set; nil when empty.
func PublishSet(publishTypes []string) map[string]bool {
	if len(publishTypes) == 0 {
		return nil
	}
	set := make(map[string]bool, len(publishTypes))
	for _, t := range publishTypes {
		set[t] = true
	}
	return set
}

// TypesParams is what decides the types a dispatcher claims.
type TypesParams struct {
	DefaultHandler bool            // it has a DefaultHandler
	Publisher      bool            // it has a Publisher
	Publish        map[string]bool // PublishTypes as a set (PublishSet); nil when unset
	Handled        iter.Seq[string]
}

// ClaimedTypes returns the event types a dispatcher of p claims, sorted,
// or all = true (and no types) when it claims events of every type: it has
// a DefaultHandler, or a Publisher without PublishTypes. Otherwise it
// claims the Handled types and, with a Publisher, those in Publish.
func ClaimedTypes(p TypesParams) (types []string, all bool) {
	if p.DefaultHandler || p.Publisher && p.Publish == nil {
		return nil, true
	}
	set := maps.Clone(p.Publish)
	if !p.Publisher || set == nil {
		set = map[string]bool{}
	}
	for t := range p.Handled {
		set[t] = true
	}
	return append([]string{}, slices.Sorted(maps.Keys(set))...), false
}

// claimTypes is the Types of the next claim: nil for every type.
func (k *kinds) claimTypes() []string {
	if k.all {
		return nil
	}
	return k.types
}

// fixClaimedTypes sets what the claims take, once Run has started (no
// Handle call succeeds after), and logs it.
func (c *Claimer) fixClaimedTypes() {
	c.kinds.types, c.kinds.all = c.cfg.ClaimedTypesFunc()
	c.kinds.circuit = c.kinds.circuitTypes()
	switch {
	case c.kinds.all:
		c.cfg.Logger.Info("pgoutbox: dispatcher claims events of every type", "table", c.cfg.Table)
	case len(c.kinds.types) == 0:
		c.cfg.Logger.Warn("pgoutbox: dispatcher claims no event type: register handlers with Handle, "+
			"or set DefaultHandler or a Publisher", "table", c.cfg.Table)
	default:
		c.cfg.Logger.Info("pgoutbox: dispatcher claims events of its types only", "table", c.cfg.Table,
			"types", c.kinds.types)
	}
}

// waitingDueFor is how long an event of a type this dispatcher does not
// claim must have been due to count as waiting: a minute, or two idle
// poll intervals when longer.
func (c *Claimer) waitingDueFor() time.Duration {
	return max(minWaitingDueFor, 2*c.cfg.IdlePollInterval)
}

// checkWaiting counts the events of types this dispatcher does not claim
// that have waited past waitingDueFor, keeps the counts for Stats and
// logs the types not logged in the last tally.WarnEvery. A catch-all
// claims every type and has nothing to count.
func (c *Claimer) checkWaiting(stop context.Context) {
	if c.kinds.all {
		return
	}
	ctx, cancel := c.opContextFrom(stop)
	defer cancel()
	dueFor := c.waitingDueFor()
	counts, err := c.cfg.Store.Waiting(ctx, c.cfg.Pool, lease.WaitingParams{
		Except: c.kinds.types, DueFor: dueFor, PerType: waitingPerType, MaxTypes: tally.MaxTypes,
	})
	if err != nil {
		if stop.Err() == nil {
			c.cfg.Report.Error("count of events waiting for a type this dispatcher does not claim failed", err)
		}
		return
	}
	for _, w := range c.kinds.waiting.Update(counts, c.cfg.Clock.Mono()) {
		c.cfg.Logger.Warn("pgoutbox: events of a type this dispatcher does not claim have waited long; "+
			"no dispatcher that claims it may be running, or it is behind", "table", c.cfg.Table, "owner", c.cfg.Owner, "type", w.Type,
			"waiting", w.Count, "at_least", w.Count >= waitingPerType, "due_for_more_than", dueFor.String())
	}
}

// circuitTypes is what the circuit needs of the claimed types.
func (k *kinds) circuitTypes() circuit.Types {
	return circuit.Types{Claim: k.claimTypes(), Published: k.publishedTypes(), HandlerOnly: k.handlerOnlyTypes()}
}

// publishedTypes is the types a probe claims: those of PublishTypes that
// the dispatcher claims, or nil (every type) for a catch-all.
func (k *kinds) publishedTypes() []string {
	if k.all || k.publish == nil {
		return nil
	}
	var types []string
	for _, t := range k.types {
		if k.publish[t] {
			types = append(types, t)
		}
	}
	return types
}

// handlerOnlyTypes is the claimed types that never need the publisher:
// none for a catch-all (it cannot claim "every type but these").
func (k *kinds) handlerOnlyTypes() []string {
	if k.all {
		return nil
	}
	var types []string
	for _, t := range k.types {
		if !k.publish[t] {
			types = append(types, t)
		}
	}
	return types
}
