package keeper

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// The heartbeat renews every held lease about every third of the lease
// duration, in one round trip per beat. Each event is credited by its own
// (id, token): the renewal of a newer claim of the same event never
// extends an older, lost one.

// heartbeat beats every third of the lease duration until quit ends,
// watching the overruns before each beat (see overrun.go).
func (k *Keeper) heartbeat(quit context.Context) {
	ticker := k.cfg.Clock.NewTicker(k.cfg.Lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-quit.Done():
			return
		case <-ticker.C:
			k.watchOverruns()
			k.beat(quit)
		}
	}
}

// beat extends the leases of all held events. Events the database did
// not renew are lost: their handlers' contexts are cancelled and their
// outcomes will not be written. Events whose rows were locked elsewhere at
// that moment (busy: another transaction, such as a claim, had looked at
// them) are neither: they keep their deadline and are tried again, up to
// BusyTries times BusyRetry apart, so that a passing row lock does not
// leave them to the next beat (two busy beats in a row could cost the
// lease). A failed renewal changes nothing locally; the local deadlines
// then decide.
func (k *Keeper) beat(quit context.Context) {
	items := k.cfg.Held.Live()
	for try := 1; len(items) > 0; try++ {
		busy, err := k.renew(items)
		if err != nil {
			k.cfg.Report.Error("lease renewal failed", err)
			return
		}
		if len(busy) == 0 || try == BusyTries || k.cfg.Clock.Sleep(quit, k.cfg.BusyRetry) != nil {
			return
		}
		items = k.cfg.Held.StillLive(busy) // not those let go or lost meanwhile
	}
}

// renew renews items in one round trip (more when a statement timeout
// makes it shrink its statements, see stmtsize.WriteRefs) and returns those whose
// rows were busy.
func (k *Keeper) renew(items []*held.Item) (busy []*held.Item, err error) {
	refs := refsOf(items)
	ctx, cancel := k.opContext()
	defer cancel()
	var sentAt time.Time
	res, err := stmtsize.WriteRefs(&k.leaseWrites, &k.refSize, len(refs), func(per int) (lease.RefResult, error) {
		sentAt = k.cfg.Clock.Now()
		return k.cfg.Store.RenewIn(ctx, k.cfg.Pool, refs, k.cfg.Lease, per)
	}, func(err error) {
		k.cfg.Report.Error("lease renewal ran out of time; renewing in smaller statements", err)
	})
	if err != nil {
		return nil, err
	}
	k.cfg.Held.Renewed(items, res, sentAt)
	isBusy := make(map[lease.Ref]bool, len(res.Busy))
	for _, r := range res.Busy {
		isBusy[r] = true
	}
	for _, it := range items {
		if isBusy[it.Ref()] {
			busy = append(busy, it)
		}
	}
	return busy, nil
}
