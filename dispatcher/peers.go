package dispatcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
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

// Anyone who may NOTIFY on the channel can send a hello, so what one
// costs is bounded: at most peersMax other dispatchers are kept (a hello
// of a new one beyond that is ignored until some are forgotten), and a
// hello's interval counts as at most helloEveryMax (the hello interval of
// the longest LeaseDuration) when deciding how long it is remembered.
const (
	peersMax      = 256
	helloEveryMax = time.Hour / 3
)

// helloPrefix starts the payload of a hello; the emitter's wake-ups carry
// an empty payload.
const helloPrefix = "pgoutbox-hello "

// hello is what a dispatcher says about itself.
type hello struct {
	Table      string `json:"table"`
	ID         string `json:"id"` // random, one per dispatcher: owners may repeat
	Owner      string `json:"owner"`
	Ordering   string `json:"ordering"`
	HeadPolicy string `json:"head_policy"`
	OrderScope string `json:"order_scope"`
	EveryMS    int64  `json:"every_ms"` // its hello interval
	Answer     bool   `json:"answer,omitempty"`
}

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

// peerSet is what this dispatcher heard from the other dispatchers of its
// table, under its own lock.
type peerSet struct {
	mu    sync.Mutex
	id    string
	peers map[string]*peer // by hello ID
	heard uint64           // hellos heard from others
}

// peer is one other dispatcher.
type peer struct {
	hello
	since, last time.Time
	conflict    bool
}

// helloEvery is how often a dispatcher says hello: every third of
// LeaseDuration (10s at the default), the heartbeat's period.
func (d *Dispatcher) helloEvery() time.Duration { return d.cfg.LeaseDuration / 3 }

// myHello is this dispatcher's hello.
func (d *Dispatcher) myHello(answer bool) hello {
	return hello{
		Table: d.cfg.Table.String(), ID: d.peers.instance(), Owner: d.cfg.Owner,
		Ordering: d.cfg.Ordering.String(), HeadPolicy: d.cfg.HeadPolicy.String(), OrderScope: d.cfg.OrderScope.String(),
		EveryMS: d.helloEvery().Milliseconds(), Answer: answer,
	}
}

// conflicts reports whether o's mode differs from h's in a way that
// keeps no order: another Ordering, or under PerKey another HeadPolicy
// or OrderScope.
func (h hello) conflicts(o hello) bool {
	return h.Ordering != o.Ordering || h.Ordering == PerKey.String() && (h.HeadPolicy != o.HeadPolicy || h.OrderScope != o.OrderScope)
}

// instance returns this dispatcher's random hello ID.
func (p *peerSet) instance() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		p.id = hex.EncodeToString(b[:])
	}
	return p.id
}

// sayHello sends this dispatcher's hello on the table's channel.
func (d *Dispatcher) sayHello(ctx context.Context, answer bool) {
	payload, _ := json.Marshal(d.myHello(answer))
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	channel := sqlname.Names{Table: d.cfg.Table}.Channel()
	if _, err := d.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, helloPrefix+string(payload)); err != nil && ctx.Err() == nil {
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
	t := time.NewTicker(d.helloEvery())
	defer t.Stop()
	for {
		select {
		case <-quit.Done():
			return
		case <-t.C:
			d.sayHello(quit, false)
			d.forgetSilent(time.Now())
		}
	}
}

// notified handles one notification on the table's channel: a hello goes
// to heard, anything else is a wake-up.
func (d *Dispatcher) notified(quit context.Context, payload string) {
	if rest, ok := strings.CutPrefix(payload, helloPrefix); ok {
		d.heard(quit, rest)
		return
	}
	d.report.Counters.Wakeups.Add(1)
	d.Trigger()
}

// heard takes another dispatcher's hello: a new one of another mode is
// logged at WARN and answered at once (unless its hello was an answer).
func (d *Dispatcher) heard(quit context.Context, payload string) {
	var h hello
	if json.Unmarshal([]byte(payload), &h) != nil || h.ID == "" {
		return // not a hello of this version: ignored
	}
	mine := d.myHello(false)
	if h.ID == mine.ID || h.Table != mine.Table {
		return
	}
	p, isNew := d.peers.note(h, mine.conflicts(h), time.Now())
	if !isNew || !p.conflict {
		return
	}
	d.cfg.Logger.Warn("pgoutbox: another dispatcher of this table uses another ordering mode; order is not kept while they both run",
		"table", mine.Table, "owner", mine.Owner, "ordering", mine.Ordering, "head_policy", mine.HeadPolicy, "order_scope", mine.OrderScope,
		"other_owner", h.Owner, "other_ordering", h.Ordering, "other_head_policy", h.HeadPolicy, "other_order_scope", h.OrderScope)
	if !h.Answer {
		d.sayHello(quit, true)
	}
}

// note records h, heard at now, and returns its peer and whether it was
// new (first heard, or heard again after it was forgotten). A new one
// beyond peersMax is not recorded, and not new.
func (p *peerSet) note(h hello, conflict bool, now time.Time) (peer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heard++
	if p.peers == nil {
		p.peers = make(map[string]*peer)
	}
	known, ok := p.peers[h.ID]
	if !ok && len(p.peers) >= peersMax {
		return peer{}, false // the set is full: forgetSilent makes room
	}
	if !ok {
		known = &peer{hello: h, since: now, conflict: conflict}
		p.peers[h.ID] = known
	}
	known.last = now
	return *known, !ok
}

// forgetSilent forgets the replicas not heard for three of their hello
// intervals (at least one second): stopped, or cut off from this one.
// The lines are logged after the peer set's lock is let go: a log handler
// may call Stats or Health, which take it.
func (d *Dispatcher) forgetSilent(now time.Time) {
	var gone []*peer
	d.peers.mu.Lock()
	for id, p := range d.peers.peers {
		if now.Sub(p.last) > silentAfter(p.hello) {
			delete(d.peers.peers, id)
			if p.conflict {
				gone = append(gone, p)
			}
		}
	}
	d.peers.mu.Unlock()
	for _, p := range gone {
		d.cfg.Logger.Info("pgoutbox: the dispatcher of another ordering mode is no longer heard",
			"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "other_owner", p.Owner, "other_ordering", p.Ordering)
	}
}

// silentAfter is how long a replica may go unheard before it is
// forgotten: three of its hello intervals (at most helloEveryMax), at
// least one second.
func silentAfter(h hello) time.Duration {
	every := time.Duration(min(max(h.EveryMS, 0), helloEveryMax.Milliseconds())) * time.Millisecond
	return max(3*every, time.Second)
}

// conflicts returns the replicas of another mode heard within their
// silentAfter, oldest first, and how many hellos were heard in all.
func (p *peerSet) conflicts(now time.Time) ([]ModeConflict, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ModeConflict
	for _, q := range p.peers {
		if q.conflict && now.Sub(q.last) <= silentAfter(q.hello) {
			out = append(out, ModeConflict{Owner: q.Owner, Ordering: q.Ordering, HeadPolicy: q.HeadPolicy,
				OrderScope: q.OrderScope, Since: q.since, LastHeard: q.last})
		}
	}
	slices.SortFunc(out, func(a, b ModeConflict) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Owner, b.Owner))
	})
	return out, p.heard
}

// fill sets the Stats of mixed modes.
func (p *peerSet) fill(s *Stats) {
	conflicts, hellos := p.conflicts(time.Now())
	s.ModeConflicts, s.Hellos = len(conflicts), hellos
}

// observeModeConflicts registers the gauge pgoutbox.mode_conflicts (the
// replicas of the table heard with another ordering mode: see
// Stats.ModeConflicts) while Run runs; call the result to unregister it.
func (d *Dispatcher) observeModeConflicts() (unregister func()) {
	return d.report.ObserveGauge("pgoutbox.mode_conflicts", "{dispatcher}",
		"Other dispatchers of the table heard with another ordering mode",
		func() int64 { conflicts, _ := d.peers.conflicts(time.Now()); return int64(len(conflicts)) })
}
