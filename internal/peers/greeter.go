package peers

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/report"
)

// PerKey is the Ordering a hello names for per-key ordering (the
// dispatcher's PerKey.String()): the one mode under which HeadPolicy and
// OrderScope count.
const PerKey = "per-key"

// Config is what a Greeter needs.
type Config struct {
	// Pool sends the hellos (pg_notify): a dispatcher without a working
	// listener still says hello, so the others hear it.
	Pool *pgxpool.Pool
	// Channel is the table's wake-up channel, the one its listener
	// LISTENs to.
	Channel string
	// Me is this dispatcher's hello, from its configuration: Table, Owner,
	// Ordering, HeadPolicy and OrderScope (named as the dispatcher's
	// String methods name them). The Greeter sets its ID, EveryMS and
	// Answer.
	Me Hello
	// Every is how often it says hello: every third of LeaseDuration, the
	// heartbeat's period.
	Every time.Duration
	// HelloAtStart makes Run say hello at once: the dispatcher has no
	// listener (WakeupDisabled), which otherwise says hello once it
	// listens (Say).
	HelloAtStart bool
	// OpTimeout bounds one hello's statement.
	OpTimeout time.Duration
	// Logger takes the WARN of a replica of another mode heard, and the
	// INFO of one no longer heard.
	Logger *slog.Logger
	// Report counts the wake-ups, reports a hello that could not be sent,
	// and registers the pgoutbox.mode_conflicts gauge.
	Report *report.Reporter
	// Trigger asks for a claim cycle: a notification that is not a hello
	// is a wake-up.
	Trigger func()
	// Clock times the hellos and ages the peers.
	Clock clock.Clock
}

// Greeter says this dispatcher's hellos on the table's channel, hears the
// others' (Notified), and keeps what it heard (a Set). Its methods may be
// called from any goroutine.
type Greeter struct {
	cfg   Config
	peers Set
}

// New returns the Greeter of cfg. It sends nothing until Say or Run.
func New(cfg Config) *Greeter {
	g := &Greeter{cfg: cfg}
	g.cfg.Me.ID, g.cfg.Me.EveryMS, g.cfg.Me.Answer = g.peers.Instance(), cfg.Every.Milliseconds(), false
	return g
}

// conflicts reports whether o's mode differs from h's in a way that
// keeps no order: another Ordering, or under PerKey another HeadPolicy
// or OrderScope.
func conflicts(h, o Hello) bool {
	return h.Ordering != o.Ordering || h.Ordering == PerKey && (h.HeadPolicy != o.HeadPolicy || h.OrderScope != o.OrderScope)
}

// Say sends this dispatcher's hello on the table's channel: the listener
// calls it once it listens (and after each reconnect).
func (g *Greeter) Say(ctx context.Context) { g.say(ctx, false) }

// say sends this dispatcher's hello, as an answer or not.
func (g *Greeter) say(ctx context.Context, answer bool) {
	me := g.cfg.Me
	me.Answer = answer
	payload, _ := json.Marshal(me)
	ctx, cancel := context.WithTimeout(ctx, g.cfg.OpTimeout)
	defer cancel()
	if _, err := g.cfg.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", g.cfg.Channel, Prefix+string(payload)); err != nil && ctx.Err() == nil {
		g.cfg.Report.Error("hello", errtext.Wrap(err, "hello notify"))
	}
}

// Run says hello every Every until quit ends, and forgets the replicas
// not heard for three of their intervals. With HelloAtStart it says hello
// at once too (otherwise the listener does, once it listens).
func (g *Greeter) Run(quit context.Context) {
	if g.cfg.HelloAtStart {
		g.say(quit, false)
	}
	t := g.cfg.Clock.NewTimer(g.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-quit.Done():
			return
		case <-t.C:
			t.Reset(g.cfg.Every) // at once, as a ticker: the hello's time does not delay the next
			g.say(quit, false)
			g.forgetSilent(g.cfg.Clock.Now())
		}
	}
}

// Notified handles one notification on the table's channel: a hello goes
// to heard, anything else is a wake-up (counted, and Trigger).
func (g *Greeter) Notified(quit context.Context, payload string) {
	if rest, ok := strings.CutPrefix(payload, Prefix); ok {
		g.heard(quit, rest)
		return
	}
	g.cfg.Report.Counters.Wakeups.Add(1)
	g.cfg.Trigger()
}

// heard takes another dispatcher's hello: a new one of another mode is
// logged at WARN and answered at once (unless its hello was an answer).
func (g *Greeter) heard(quit context.Context, payload string) {
	var h Hello
	if json.Unmarshal([]byte(payload), &h) != nil || h.ID == "" {
		return // not a hello of this version: ignored
	}
	mine := g.cfg.Me
	if h.ID == mine.ID || h.Table != mine.Table {
		return
	}
	p, isNew := g.peers.Note(h, conflicts(mine, h), g.cfg.Clock.Now())
	if !isNew || !p.Conflict {
		return
	}
	g.cfg.Logger.Warn("pgoutbox: another dispatcher of this table uses another ordering mode; order is not kept while they both run",
		"table", mine.Table, "owner", mine.Owner, "ordering", mine.Ordering, "head_policy", mine.HeadPolicy, "order_scope", mine.OrderScope,
		"other_owner", h.Owner, "other_ordering", h.Ordering, "other_head_policy", h.HeadPolicy, "other_order_scope", h.OrderScope)
	if !h.Answer {
		g.say(quit, true)
	}
}

// forgetSilent forgets the replicas not heard for three of their hello
// intervals (at least one second): stopped, or cut off from this one.
// The lines are logged after the peer set's lock is let go (Set.Forget
// returns them): a log handler may call Stats or Health, which take it.
func (g *Greeter) forgetSilent(now time.Time) {
	for _, p := range g.peers.Forget(now) {
		g.cfg.Logger.Info("pgoutbox: the dispatcher of another ordering mode is no longer heard",
			"table", g.cfg.Me.Table, "owner", g.cfg.Me.Owner, "other_owner", p.Hello.Owner, "other_ordering", p.Hello.Ordering)
	}
}

// Conflicts returns the replicas of another mode heard within their
// SilentAfter now, oldest first, and how many hellos were heard in all:
// what Health and Stats report.
func (g *Greeter) Conflicts() ([]Conflict, uint64) { return g.peers.Conflicts(g.cfg.Clock.Now()) }

// Observe registers the gauge pgoutbox.mode_conflicts (the replicas of
// the table heard with another ordering mode: see Conflicts) while the
// dispatcher runs; call the result to unregister it.
func (g *Greeter) Observe() (unregister func()) {
	return g.cfg.Report.ObserveGauge("pgoutbox.mode_conflicts", "{dispatcher}",
		"Other dispatchers of the table heard with another ordering mode",
		func() int64 { conflicts, _ := g.Conflicts(); return int64(len(conflicts)) })
}
