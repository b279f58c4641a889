package dispatcher

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// heartbeatLoop renews every held lease about every third of the lease
// duration, in one round trip per beat, until quit closes.
func (d *Dispatcher) heartbeatLoop(quit <-chan struct{}) {
	ticker := time.NewTicker(d.cfg.LeaseDuration / 3)
	defer ticker.Stop()
	for {
		select {
		case <-quit:
			return
		case <-ticker.C:
			d.renew()
		}
	}
}

// renew extends the leases of all held events. Each event is credited by
// its own (id, token): the renewal of a newer claim of the same event
// never extends an older, lost one. Events the database did
// not renew are lost: their handlers' contexts are cancelled and their
// outcomes will not be written. Events whose rows were locked elsewhere at
// that moment (busy) are neither: they keep their deadline until the next
// beat. A failed renewal changes nothing locally; the local deadlines
// then decide.
func (d *Dispatcher) renew() {
	items := d.held.live()
	if len(items) == 0 {
		return
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.ref()
	}
	ctx, cancel := context.WithTimeout(d.dbCtx, opTimeout(d.cfg.LeaseDuration))
	defer cancel()
	sentAt := d.cfg.Test.Now()
	d.leaseWrites.Lock()
	res, err := d.store.Renew(ctx, d.pool, refs, d.cfg.LeaseDuration)
	d.leaseWrites.Unlock()
	if err != nil {
		d.reportError("lease renewal failed", err)
		return
	}
	d.held.renewed(items, res, sentAt)
}
