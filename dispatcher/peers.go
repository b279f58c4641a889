package dispatcher

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/peers"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Mixed ordering modes. Every dispatcher of one table must use the same
// Ordering, HeadPolicy and OrderScope (see Config.Ordering): an unordered
// replica takes a key's events without looking at its head, so a mix
// keeps no order, silently. To notice a mix, each dispatcher says hello
// on the table's wake-up channel, the channel its listener already
// LISTENs to: a pg_notify whose payload (helloPrefix, then JSON) names
// its table, owner and mode. It says hello when its listener starts
// listening (and after each reconnect), every helloEvery, and at once in
// answer to the first hello of a dispatcher of another mode, so that a
// replica started beside one of another mode learns of it in one round
// trip. A hello wakes no claim. A dispatcher that hears a hello of another
// mode logs a WARN naming the other's owner and mode, once per replica,
// and reports it in Health.ModeConflicts and Stats.ModeConflicts until
// that replica has not been heard for three of its hello intervals.
//
// A dispatcher without a working listener (WakeupDisabled, a pooler in
// transaction mode, a listener reconnecting) still says hello through
// its pool, so the others hear it, but hears none itself.

// ModeConflict is another dispatcher of the same table whose ordering
// configuration (Ordering, and under PerKey HeadPolicy and OrderScope)
// differs from this one's, as its hello said (see docs/ordering.md,
// "Mixed modes").
type ModeConflict struct {
	// Owner is the other dispatcher's Config.Owner.
	Owner string
	// Ordering, HeadPolicy and OrderScope are its configuration, named as
	// their String methods name them ("per-key", "block-key", "key").
	Ordering, HeadPolicy, OrderScope string
	// Since is when this dispatcher first heard it (local time).
	Since time.Time
	// LastHeard is when this dispatcher last heard it (local time).
	LastHeard time.Time
}

// helloEvery is how often a dispatcher says hello: every third of
// LeaseDuration (10s at the default), the heartbeat's period.
func (d *Dispatcher) helloEvery() time.Duration { return d.cfg.LeaseDuration / 3 }

// The other dispatchers' hellos and what they say are kept in
// internal/peers (its Set); this file sends and receives them.

// myHello is this dispatcher's hello.
func (d *Dispatcher) myHello(answer bool) peers.Hello {
	return peers.Hello{
		Table: d.cfg.Table.String(), ID: d.peers.Instance(), Owner: d.cfg.Owner,
		Ordering: d.cfg.Ordering.String(), HeadPolicy: d.cfg.HeadPolicy.String(), OrderScope: d.cfg.OrderScope.String(),
		EveryMS: d.helloEvery().Milliseconds(), Answer: answer,
	}
}

// conflicts reports whether o's mode differs from h's in a way that
// keeps no order: another Ordering, or under PerKey another HeadPolicy
// or OrderScope.
func conflicts(h, o peers.Hello) bool {
	return h.Ordering != o.Ordering || h.Ordering == PerKey.String() && (h.HeadPolicy != o.HeadPolicy || h.OrderScope != o.OrderScope)
}

// sayHello sends this dispatcher's hello on the table's channel.
func (d *Dispatcher) sayHello(ctx context.Context, answer bool) {
	payload, _ := json.Marshal(d.myHello(answer))
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	channel := sqlname.Names{Table: d.cfg.Table}.Channel()
	if _, err := d.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, peers.Prefix+string(payload)); err != nil && ctx.Err() == nil {
		d.report.Error("hello", errtext.Wrap(err, "hello notify"))
	}
}

// helloLoop says hello every helloEvery until quit ends, and forgets the
// replicas not heard for three of their intervals. With WakeupDisabled it
// says hello at once too (otherwise the listener does, once it listens).
func (d *Dispatcher) helloLoop(quit context.Context) {
	if d.cfg.Wakeup == WakeupDisabled {
		d.sayHello(quit, false)
	}
	t := d.clock.NewTicker(d.helloEvery())
	defer t.Stop()
	for {
		select {
		case <-quit.Done():
			return
		case <-t.C:
			d.sayHello(quit, false)
			d.forgetSilent(d.clock.Mono())
		}
	}
}

// notified handles one notification on the table's channel: a hello goes
// to heard, anything else is a wake-up.
func (d *Dispatcher) notified(quit context.Context, payload string) {
	if rest, ok := strings.CutPrefix(payload, peers.Prefix); ok {
		d.heard(quit, rest)
		return
	}
	d.report.Counters.Wakeups.Add(1)
	d.Trigger()
}

// heard takes another dispatcher's hello: a new one of another mode is
// logged at WARN and answered at once (unless its hello was an answer).
func (d *Dispatcher) heard(quit context.Context, payload string) {
	var h peers.Hello
	if json.Unmarshal([]byte(payload), &h) != nil || h.ID == "" {
		return // not a hello of this version: ignored
	}
	mine := d.myHello(false)
	if h.ID == mine.ID || h.Table != mine.Table {
		return
	}
	p, isNew := d.peers.Note(h, conflicts(mine, h), d.clock.Mono())
	if !isNew || !p.Conflict {
		return
	}
	d.cfg.Logger.Warn("pgoutbox: another dispatcher of this table uses another ordering mode; order is not kept while they both run",
		"table", mine.Table, "owner", mine.Owner, "ordering", mine.Ordering, "head_policy", mine.HeadPolicy, "order_scope", mine.OrderScope,
		"other_owner", h.Owner, "other_ordering", h.Ordering, "other_head_policy", h.HeadPolicy, "other_order_scope", h.OrderScope)
	if !h.Answer {
		d.sayHello(quit, true)
	}
}

// forgetSilent forgets the replicas not heard for three of their hello
// intervals (at least one second): stopped, or cut off from this one.
// The lines are logged after the peer set's lock is let go (peers.Set
// Forget returns them): a log handler may call Stats or Health, which
// take it.
func (d *Dispatcher) forgetSilent(now time.Time) {
	for _, p := range d.peers.Forget(now) {
		d.cfg.Logger.Info("pgoutbox: the dispatcher of another ordering mode is no longer heard",
			"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "other_owner", p.Hello.Owner, "other_ordering", p.Hello.Ordering)
	}
}

// modeConflicts returns the replicas of another mode heard within their
// peers.SilentAfter at now, oldest first, and how many hellos were heard
// in all.
func (d *Dispatcher) modeConflicts(now time.Time) ([]ModeConflict, uint64) {
	heard, hellos := d.peers.Conflicts(now)
	var out []ModeConflict
	for _, c := range heard {
		out = append(out, ModeConflict(c))
	}
	return out, hellos
}

// fillPeers sets the Stats of mixed modes.
func (d *Dispatcher) fillPeers(s *Stats) {
	conflicts, hellos := d.modeConflicts(d.clock.Mono())
	s.ModeConflicts, s.Hellos = len(conflicts), hellos
}

// observeModeConflicts registers the gauge pgoutbox.mode_conflicts (the
// replicas of the table heard with another ordering mode: see
// Stats.ModeConflicts) while Run runs; call the result to unregister it.
func (d *Dispatcher) observeModeConflicts() (unregister func()) {
	return d.report.ObserveGauge("pgoutbox.mode_conflicts", "{dispatcher}",
		"Other dispatchers of the table heard with another ordering mode",
		func() int64 { conflicts, _ := d.peers.Conflicts(d.clock.Mono()); return int64(len(conflicts)) })
}
