package ticker

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// Defaults of Config.
const (
	DefaultInterval   = 10 * time.Millisecond
	DefaultIdle       = time.Second
	DefaultLease      = 10 * time.Second
	DefaultPartsEvery = 100
)

// Config configures a Ticker.
type Config struct {
	// Store is the log's store. Required.
	Store *store.Store
	// Owner names this relay in the lease row (outboxctl relay status).
	Owner string
	// Interval is the time between tick calls. Defaults to 10ms.
	Interval time.Duration
	// Idle is how long without events before a tick is recorded anyway
	// (it keeps xmin moving for retention). Defaults to 1s.
	Idle time.Duration
	// Lease is the ticker lease's length; it is renewed every third of
	// it, and a follower tries to take it at that pace. Defaults to 10s.
	Lease time.Duration
	// PartsEvery is how many tick calls pass between two store.KeepParts
	// calls (it is also called when the lease is taken). Defaults to 100.
	PartsEvery int
	// Clock tells the time; the zero Clock is the wall clock.
	Clock clock.Clock
	// OnTick is called with the id of each tick recorded. May be nil.
	OnTick func(id int64)
	// OnParts is called after each KeepParts with the parts added and
	// the head-room in xids. May be nil.
	OnParts func(added int, headroomXids uint64)
	// OnError is called with the errors (a failed statement, a snapshot
	// that went backwards); the ticker goes on. A repeated error (same
	// sentinel or SQLSTATE, else same text) is passed on at most once per
	// third of Lease. May be nil.
	OnError func(error)
	// OnCall is called after each tick call with whether it recorded a
	// tick and its error: for tests that wait for calls. May be nil.
	OnCall func(made bool, err error)
}

// Ticker holds the ticker lease when it can and ticks.
type Ticker struct {
	cfg   Config
	token uuid.UUID
	held  atomic.Bool
	// errs holds the repeated errors back (Run's goroutine only).
	errs errLimit
}

// New returns a Ticker with cfg's defaults applied. It panics when
// cfg.Store is nil.
func New(cfg Config) *Ticker {
	if cfg.Store == nil {
		panic("ticker: Config.Store is nil")
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	cfg.Idle = cmp.Or(cfg.Idle, DefaultIdle)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.PartsEvery = cmp.Or(cfg.PartsEvery, DefaultPartsEvery)
	return &Ticker{cfg: cfg, token: uuid.New(), errs: errLimit{every: cfg.Lease / 3, last: map[string]time.Time{}}}
}

// Held reports whether this Ticker holds the ticker lease (as of its last
// renewal or tick).
func (t *Ticker) Held() bool { return t.held.Load() }

// loop is Run's state.
type loop struct {
	trustUntil time.Time // the lease is ours until then (local clock)
	nextTake   time.Time // when to renew or try to take it next
	calls      int       // tick calls since the last KeepParts
	xids       xidRate   // the observed transaction id rate
}

// Run takes the lease and ticks until ctx ends, then releases the lease
// (if held) and returns nil.
func (t *Ticker) Run(ctx context.Context) error {
	every := t.cfg.Clock.NewTicker(t.cfg.Interval)
	defer every.Stop()
	var l loop
	for {
		t.step(ctx, &l)
		select {
		case <-ctx.Done():
			t.release()
			return nil
		case <-every.C:
		}
	}
}

// step renews or takes the lease when due, then ticks while it is held.
func (t *Ticker) step(ctx context.Context, l *loop) {
	now := t.cfg.Clock.Now()
	if !now.Before(l.nextTake) {
		t.take(ctx, l, now)
	}
	if !t.held.Load() || !t.cfg.Clock.Now().Before(l.trustUntil) {
		return
	}
	if l.calls == 0 || l.calls >= t.cfg.PartsEvery {
		t.keepParts(ctx, l)
		l.calls = 0
	}
	l.calls++
	id, made, err := t.cfg.Store.Tick(ctx, t.token, t.cfg.Idle)
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		t.lost(l)
	case err != nil:
		t.report(ctx, err)
	case made && t.cfg.OnTick != nil:
		t.cfg.OnTick(id)
	}
	if t.cfg.OnCall != nil {
		t.cfg.OnCall(made, err)
	}
}

// take renews or takes the lease.
func (t *Ticker) take(ctx context.Context, l *loop, start time.Time) {
	l.nextTake = start.Add(t.cfg.Lease / 3)
	held, err := t.cfg.Store.TakeTicker(ctx, t.cfg.Owner, t.token, t.cfg.Lease)
	if err != nil {
		t.report(ctx, err) // keep trusting the lease we had until it runs out
		return
	}
	if !held {
		t.lost(l)
		return
	}
	if !t.held.Swap(true) {
		l.calls = 0 // add parts at once when the lease is taken
	}
	l.trustUntil = start.Add(t.cfg.Lease)
}

// lost makes the ticker a follower.
func (t *Ticker) lost(l *loop) {
	t.held.Store(false)
	l.trustUntil = time.Time{}
}

// keepParts keeps the parts for two days of transaction ids at the
// observed rate (store.PartsFor) attached ahead of the current one.
func (t *Ticker) keepParts(ctx context.Context, l *loop) {
	p, err := t.cfg.Store.KeepParts(ctx, store.PartsFor(l.xids.rate))
	if err != nil {
		t.report(ctx, err)
		return
	}
	l.xids.observe(p.Xmax, t.cfg.Clock.Mono())
	if t.cfg.OnParts != nil {
		t.cfg.OnParts(p.Added, p.HeadroomXids)
	}
}

// release gives the lease up so that another relay takes it at once.
func (t *Ticker) release() {
	if !t.held.Swap(false) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.cfg.Store.ReleaseTicker(ctx, t.token); err != nil && t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
}

// report passes err to OnError unless it is only ctx ending or a repeat
// held back.
func (t *Ticker) report(ctx context.Context, err error) {
	if ctx.Err() != nil || t.cfg.OnError == nil || !t.errs.allow(err, t.cfg.Clock.Mono()) {
		return
	}
	t.cfg.OnError(err)
}
