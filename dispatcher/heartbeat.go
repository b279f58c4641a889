package dispatcher

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// heartbeat renews every held lease about every third of the lease
// duration, in one round trip per beat. Each event is credited by its own
// (id, token): the renewal of a newer claim of the same event never
// extends an older, lost one.
type heartbeat struct {
	ctx         context.Context // the dispatcher's own statements: never cancelled
	held        *heldSet
	store       *lease.Store
	pool        *pgxpool.Pool
	leaseWrites *sync.Mutex // see Dispatcher.leaseWrites
	report      *reporter
	now         func() time.Time // the clock of local deadlines (Config.now, set by tests)
	lease       time.Duration    // LeaseDuration
}

func newHeartbeat(ctx context.Context, d *Dispatcher) *heartbeat {
	return &heartbeat{
		ctx: ctx, held: d.held, store: d.store, pool: d.pool, leaseWrites: &d.leaseWrites,
		report: d.reporter, now: d.cfg.now, lease: d.cfg.LeaseDuration,
	}
}

// run beats every third of the lease duration until quit closes.
func (h *heartbeat) run(quit <-chan struct{}) {
	ticker := time.NewTicker(h.lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-quit:
			return
		case <-ticker.C:
			h.beat()
		}
	}
}

// beat extends the leases of all held events. Events the database did
// not renew are lost: their handlers' contexts are cancelled and their
// outcomes will not be written. Events whose rows were locked elsewhere at
// that moment (busy) are neither: they keep their deadline until the next
// beat. A failed renewal changes nothing locally; the local deadlines
// then decide.
func (h *heartbeat) beat() {
	items := h.held.live()
	if len(items) == 0 {
		return
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.ref()
	}
	ctx, cancel := context.WithTimeout(h.ctx, opTimeout(h.lease))
	defer cancel()
	sentAt := h.now()
	h.leaseWrites.Lock()
	res, err := h.store.Renew(ctx, h.pool, refs, h.lease)
	h.leaseWrites.Unlock()
	if err != nil {
		h.report.reportError("lease renewal failed", err)
		return
	}
	h.held.renewed(items, res, sentAt)
}
