package claim

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/waker"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Scheduler is what the claimer asks of the scheduling mode (internal/run implements it).
type Scheduler interface {
	// Claimers is how many claims may be in flight at once (1 in claim order, else Config.Claimers).
	Claimers() int
	// Room is how many of the held events count against the room of the next claim
	// (held minus waiting suspects up to a batch, except per key: all of them).
	Room(held, suspectsWaiting int) int
	// SkipSuspects reports whether the next claim leaves suspects out (never per key).
	SkipSuspects(suspectsWaiting int) bool
	// Ordered reports whether claims take each key's run from its head (per key).
	Ordered() bool
	// StartsFor is how many of the next claim's events (at most limit) it marks
	// started, and how many handler slots it took for them (see internal/run/slots.go).
	StartsFor(limit int) (starts, slots int)
	// ReleaseSlots gives back n handler slots taken by StartsFor and not used.
	ReleaseSlots(n int)
	// Dispatch runs a claimed batch (its items already in the held set) in the
	// background and returns the batch's context (ends when every item is let go).
	Dispatch(items []*held.Item) context.Context
	// WakeOnRetry reports whether a scheduled retry asks for a claim at once
	// (per key: a released head may unblock its key) rather than arming the due timer.
	WakeOnRetry() bool
}

// Config is what a Claimer needs. Every field is required unless said
// otherwise; the dispatcher fills it from its own Config in New.
type Config struct {
	Held      *held.Set
	Store     *lease.Store
	Pool      *pgxpool.Pool
	Report    *report.Reporter
	Circuit   *circuit.Circuit
	Scheduler Scheduler
	// Clock is the dispatcher's clock: its Now (the local lease
	// deadlines', which tests replace) gives a claim's sent time (the start
	// of its leases' trust) and the budget of a recovery pass; its real
	// time (Mono) decides the wake-up cooldowns, how long ago the last
	// recovery ran and when a waiting type was last logged.
	Clock  clock.Clock
	Logger *slog.Logger
	Table  string // for the logs
	Owner  string // the claims' lease owner

	BatchSize, Concurrency, Claimers int
	PollInterval, IdlePollInterval   time.Duration
	// RecoverEvery is the polls between two recovery passes;
	// RecoverBatchSize bounds one recovery statement; MaxRecoveries is
	// how many recoveries make an event FAILED.
	RecoverEvery, RecoverBatchSize, MaxRecoveries int
	AtMostOnce                                    bool // Delivery AtMostOnce
	LeaseDuration                                 time.Duration
	// OpTimeout bounds each of the claimer's own database operations.
	OpTimeout      time.Duration
	WakeupCooldown time.Duration
	// BlockFailed (HeadPolicy BlockKey) and ByType (OrderScope
	// ScopeKeyAndType) are the per-key claims' parameters.
	BlockFailed, ByType bool

	// Publish is Config.PublishTypes as a set; nil when unset.
	Publish map[string]bool
	// ClaimedTypesFunc is the dispatcher's ClaimedTypes, read once when
	// Run starts (Handle is refused from then on).
	ClaimedTypesFunc func() (types []string, all bool)

	// Trigger asks for a claim (manual and notify wake-ups, coalesced);
	// RetryScheduled says the completer scheduled a retry (the next due
	// time moved); Stop is closed when the dispatcher's Stop is called.
	Trigger, RetryScheduled, Stop <-chan struct{}
	// WakeupsActiveFunc reports whether the listener is connected and
	// listening.
	WakeupsActiveFunc func() bool
	// ClaimedFunc is told the result of each claim (nil: it succeeded),
	// for the dispatcher's Health.
	ClaimedFunc func(err error)
	// FailedFunc reports an event that recovery made FAILED (the public
	// Outcome is the dispatcher's), with ErrWorkerLost.
	FailedFunc func(e outbox.Event)

	// Test hooks, nil in production. ClaimHook is called after each claim
	// that took events, before they are dispatched; RecoverPassHook after
	// each recovery pass with the poll cycle's number, the statements it
	// ran and the rows they returned; FollowUpsOverHook on the coordinator
	// goroutine when the waker starts a claim and arms no follow-up after
	// it; DueProbeHook on the coordinator goroutine after each next-due
	// probe that claims settled on (see armDue), with how long until the
	// next due event and whether there is one, before the due timer is
	// armed from them.
	ClaimHook         func(events []outbox.Event)
	RecoverPassHook   func(poll uint64, statements, rows int)
	FollowUpsOverHook func()
	DueProbeHook      func(wait time.Duration, found bool)
}

// Claimer decides when to claim and claims: the coordinator loop of a
// dispatcher. Build it with New; Run runs it once.
type Claimer struct {
	cfg   Config
	kinds kinds // what it claims and publishes, and what it saw waiting

	// Set by Run before any claim starts; read-only after.
	dbCtx   context.Context // the claimer's own statements: never cancelled
	workCtx context.Context // the parent of the claimed batches' contexts
}

// New returns the claimer of cfg. It starts nothing.
func New(cfg Config) *Claimer {
	return &Claimer{cfg: cfg, kinds: kinds{publish: cfg.Publish}}
}

// Run is the one loop that decides when to claim: at start, on every
// poll, on a trigger (manual or a notification) and its follow-ups (see
// waker.Waker), when slots free up while a backlog remains, when a claim comes
// back full, and (while wake-ups work) when the next retry becomes due. Up
// to Claimers claims run at once.
// Polls recover expired leases every RecoverEvery-th time. It returns when
// ctx ends or Stop is closed, once no claim is in flight. Its statements
// keep ctx's values but not its cancellation; work is the parent of the
// claimed batches' contexts (the handlers' and publishes').
func (c *Claimer) Run(ctx, work context.Context) {
	c.dbCtx, c.workCtx = context.WithoutCancel(ctx), work
	// Recoveries run in this loop: a stop must end one that waits for the
	// database (it rolls back, and the next dispatcher does it).
	stopCtx, cancel := c.untilStop(ctx)
	defer cancel()
	p := c.newPoller()
	defer p.stop()
	c.fixClaimedTypes()
	cl := c.newClaims()
	defer cl.wait()
	wakeTimer := c.stoppedTimer()
	defer wakeTimer.Stop()
	w := waker.New(waker.Config{Cooldown: c.cfg.WakeupCooldown, BatchSize: c.cfg.BatchSize, ArmFunc: func(wait time.Duration) { wakeTimer.Reset(wait) },
		FollowUpsOver: c.cfg.FollowUpsOverHook})
	if ctx.Err() != nil || c.stopRequested() {
		return
	}
	cl.wake()
	for {
		if ctx.Err() != nil || c.stopRequested() {
			return // before any other ready case: a stop is never put off
		}
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.Stop:
			return
		case <-p.poll.C:
			c.pollCycle(stopCtx, p)
			cl.wake()
			p.next(c.cfg.WakeupsActiveFunc(), c.cfg.Report.Counters.Claimed.Load())
		case <-c.cfg.Trigger:
			if w.Wakeup(c.cfg.Clock.Mono(), cl.inflight > 0) {
				cl.wake()
			}
		case <-wakeTimer.C:
			if w.Fired(c.cfg.Clock.Mono(), cl.inflight > 0) {
				cl.wake()
			}
		case <-c.cfg.Held.Freed():
			cl.roomFreed()
		case <-c.cfg.RetryScheduled:
			switch {
			case c.cfg.Scheduler.WakeOnRetry():
				// An outcome or release of a key's event was written: the
				// key's next event may be its head now. Claim at once,
				// wake-ups or not; a claim that finds nothing settles and
				// arms the due timer as any other.
				cl.wake()
			case cl.settled():
				c.armDue(p)
			}
		case <-p.due.C:
			c.cfg.Report.Counters.DueWakeups.Add(1)
			cl.wake()
		case <-cl.retry.C:
			cl.retryNow()
		case r := <-cl.results:
			if r.got > 0 {
				p.unstretch()
			}
			settled := cl.finished(r)
			if w.Finished(c.cfg.Clock.Mono(), r.got, cl.inflight > 0) {
				cl.wake()
				settled = false
			}
			if settled {
				c.armDue(p)
			}
		}
		c.cfg.Report.Counters.PollInterval.Store(int64(p.interval))
	}
}

// Waiting returns the last counts of events of types this claimer does
// not claim that have waited long (see checkWaiting), by type, and their
// total; nil before the first count.
func (c *Claimer) Waiting() (byType map[string]int64, total int64) {
	return c.kinds.waiting.Counts()
}

// stopRequested reports whether Stop was closed.
func (c *Claimer) stopRequested() bool {
	select {
	case <-c.cfg.Stop:
		return true
	default:
		return false
	}
}

// untilStop returns a context that ends with ctx or when Stop is closed;
// call cancel when done with it.
func (c *Claimer) untilStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		select {
		case <-c.cfg.Stop:
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// opContext bounds one database operation of the claimer's own.
func (c *Claimer) opContext() (context.Context, context.CancelFunc) {
	return c.opContextFrom(c.dbCtx)
}

// opContextFrom bounds one database operation under parent.
func (c *Claimer) opContextFrom(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.cfg.OpTimeout)
}

// stoppedTimer returns a timer that has not been armed.
func (c *Claimer) stoppedTimer() *time.Timer {
	t := c.cfg.Clock.NewTimer(time.Hour)
	t.Stop()
	return t
}
