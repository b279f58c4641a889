package dispatcher

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/peers"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Mixed ordering modes. Every dispatcher of one table must use the same
// Ordering, HeadPolicy and OrderScope (see Config.Ordering): an unordered
// replica takes a key's events without looking at its head, so a mix
// keeps no order, silently. To notice a mix, each dispatcher says hello
// on the table's wake-up channel, the channel its listener already
// LISTENs to: a pg_notify whose payload (peers.Prefix, then JSON) names
// its table, owner and mode. It says hello when its listener starts
// listening (and after each reconnect), every third of LeaseDuration,
// and at once in answer to the first hello of a dispatcher of another
// mode, so that a replica started beside one of another mode learns of
// it in one round trip. A hello wakes no claim. A dispatcher that hears a hello of another
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

// The hellos are sent and heard by internal/peers (its Greeter), which
// keeps the other dispatchers' hellos and what they say; this file makes
// this dispatcher's Greeter and turns what it heard into ModeConflicts.

// newGreeter returns the Greeter of cfg (see internal/peers): it says
// hello every third of LeaseDuration (10s at the default), the
// heartbeat's period, and passes the wake-ups it hears to trigger.
func newGreeter(cfg Config, pool *pgxpool.Pool, r *report.Reporter, trigger func()) *peers.Greeter {
	return peers.New(peers.Config{
		Pool: pool, Channel: sqlname.Names{Table: cfg.Table}.Channel(),
		Me: peers.Hello{
			Table: cfg.Table.String(), Owner: cfg.Owner,
			Ordering: cfg.Ordering.String(), HeadPolicy: cfg.HeadPolicy.String(), OrderScope: cfg.OrderScope.String(),
		},
		Every: cfg.LeaseDuration / 3, HelloAtStart: cfg.Wakeup == WakeupDisabled, OpTimeout: opTimeout(cfg.LeaseDuration),
		Logger: cfg.Logger, Report: r, Trigger: trigger, Clock: clock.Real(),
	})
}

// modeConflicts returns the conflicts the Greeter heard as ModeConflicts
// (nil when none).
func modeConflicts(heard []peers.Conflict) []ModeConflict {
	var out []ModeConflict
	for _, c := range heard {
		out = append(out, ModeConflict(c))
	}
	return out
}
