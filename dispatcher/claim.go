package dispatcher

import (
	"maps"

	"github.com/pgoutbox/pgoutbox/internal/claim"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// newClaimer returns the claimer of the dispatcher (see internal/claim):
// the coordinator loop, its claims and recovery passes. It asks the
// scheduling mode how to claim, and hands the mode the claimed batches.
// Events that recovery made FAILED (their lease expired once too often,
// or under AtMostOnce) are reported as any other FAILED outcome, with
// CodeWorkerLost. Its lease-deadline clock is Config.now; the wake-up
// cooldowns and the recovery cadence read the wall clock, as they always
// have.
func newClaimer(d *Dispatcher) *claim.Claimer {
	cfg := d.cfg
	return claim.New(claim.Config{
		Held: d.held, Store: d.store, Pool: d.pool, Report: d.report, Circuit: d.circuit, Scheduler: d.mode,
		Clock: d.clock, Logger: cfg.Logger, Table: cfg.Table.String(), Owner: cfg.Owner,
		BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency, Claimers: cfg.Claimers,
		PollInterval: cfg.PollInterval, IdlePollInterval: cfg.IdlePollInterval,
		RecoverEvery: cfg.RecoverEvery, RecoverBatchSize: cfg.RecoverBatchSize, MaxRecoveries: cfg.MaxRecoveries,
		AtMostOnce: cfg.Delivery == AtMostOnce, LeaseDuration: cfg.LeaseDuration, OpTimeout: opTimeout(cfg.LeaseDuration),
		WakeupCooldown: cfg.WakeupCooldown, BlockFailed: cfg.HeadPolicy == BlockKey, ByType: cfg.OrderScope == ScopeKeyAndType,
		Publish: d.publish, ClaimedTypesFunc: d.ClaimedTypes,
		Trigger: d.trigger, RetryScheduled: d.retryScheduled, Stop: d.life.StopCh(),
		WakeupsActiveFunc: d.wakeupsActive.Load, ClaimedFunc: d.health.claimed,
		FailedFunc: func(e outbox.Event) {
			reportFailed(d.dbCtx, d.report, cfg.OnOutcome, Outcome{Event: e, Status: outbox.StatusFailed, Code: outbox.CodeWorkerLost, Err: claim.ErrWorkerLost})
		},
		ClaimHook: cfg.onClaimed, RecoverPassHook: cfg.onRecoverPass, FollowUpsOverHook: cfg.onFollowUpsOver,
		DueProbeHook: cfg.onDueProbe,
	})
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
	return claim.ClaimedTypes(claim.TypesParams{
		DefaultHandler: d.defaultHandler != nil, Publisher: d.cfg.Publisher != nil,
		Publish: d.publish, Handled: maps.Keys(d.handlers),
	})
}
