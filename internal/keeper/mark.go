package keeper

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// Start marks. Recovery charges a recovery (the poison budget, see
// MaxRecoveries) only to an event whose row shows that its attempt
// started, so each attempt is marked started in the database before it
// starts: by the claim itself for the events the dispatcher will start at
// once, or by the marker (one statement for every event waiting to be
// marked) for an event that was claimed ahead and now has a handler slot.
// The run pipeline queues the marks it waits for in the held set
// (held.Set.QueueMarks) and waits there (Item.Marking, held.Set.Startable);
// the rules deciding which events a claim marks are the run pipeline's.

// markLoop is the marker: it writes the start marks that handler slots
// wait for, all waiting ones in one statement.
func (k *Keeper) markLoop(quit context.Context) {
	k.cfg.Clock.Serve(quit, k.cfg.Held.MarksWanted(), func() time.Duration {
		if k.markOnce() {
			return k.cfg.BusyRetry
		}
		return 0
	})
}

// markOnce writes the waiting marks. It reports whether some must be
// tried again (their rows were busy, or the write failed).
func (k *Keeper) markOnce() (again bool) {
	items := k.cfg.Held.TakeMarks()
	if len(items) == 0 {
		return false
	}
	refs := refsOf(items)
	ctx, cancel := k.opContext()
	defer cancel()
	res, err := stmtsize.WriteRefs(&k.leaseWrites, &k.refSize, len(refs), func(per int) (lease.RefResult, error) {
		return k.cfg.Store.StartIn(ctx, k.cfg.Pool, refs, k.cfg.AtLeastOnce, per)
	}, func(err error) { k.cfg.Report.Error("start marks ran out of time; marking in smaller statements", err) })
	if err != nil {
		k.cfg.Report.Error("start marks failed, will retry", err)
		res = lease.RefResult{Busy: refs}
	}
	return k.cfg.Held.Marked(items, res)
}
