package dispatcher

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/keeper"
)

// newKeeper is the keeper of d's leases (see internal/keeper): its
// heartbeat, its start marks and its overrun WARNs, writing under ctx
// (the dispatcher's own statements: never cancelled).
func newKeeper(ctx context.Context, d *Dispatcher) *keeper.Keeper {
	return keeper.New(keeper.Config{
		Ctx: ctx, Held: d.held, Store: d.store, Pool: d.pool, Report: d.report,
		Logger: d.cfg.Logger, Table: d.cfg.Table.String(), Owner: d.cfg.Owner,
		Clock: d.clock, Lease: d.cfg.LeaseDuration,
		OpTimeout: opTimeout(d.cfg.LeaseDuration), AtLeastOnce: d.cfg.Delivery == AtLeastOnce,
	})
}
