package dispatcher

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// heartbeat renews every held lease about every third of the lease
// duration, in one round trip per beat. Each event is credited by its own
// (id, token): the renewal of a newer claim of the same event never
// extends an older, lost one.
type heartbeat struct {
	ctx         context.Context // the dispatcher's own statements: never cancelled
	held        *held.Set
	store       *lease.Store
	pool        *pgxpool.Pool
	leaseWrites *sync.Mutex    // see Dispatcher.leaseWrites
	refSize     *stmtsize.Size // see Dispatcher.refSize
	report      *report.Reporter
	now         func() time.Time // the clock of local deadlines (Config.now, set by tests)
	lease       time.Duration    // LeaseDuration
	busyRetry   time.Duration    // how soon busy rows are tried again (busyRetry; tests wait longer)
	watch       func()           // reports the calls running past their timeout (see overrun.go)
}

func newHeartbeat(ctx context.Context, d *Dispatcher) *heartbeat {
	return &heartbeat{
		ctx: ctx, held: d.held, store: d.store, pool: d.pool, leaseWrites: &d.leaseWrites, refSize: &d.refSize,
		report: d.report, now: d.cfg.now, lease: d.cfg.LeaseDuration, busyRetry: busyRetry,
		watch: d.watchOverruns,
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
			if h.watch != nil {
				h.watch()
			}
			h.beat(quit)
		}
	}
}

// beat extends the leases of all held events. Events the database did
// not renew are lost: their handlers' contexts are cancelled and their
// outcomes will not be written. Events whose rows were locked elsewhere at
// that moment (busy: another transaction, such as a claim, had looked at
// them) are neither: they keep their deadline and are tried again, up to
// busyTries times busyRetry apart, so that a passing row lock does not
// leave them to the next beat (two busy beats in a row could cost the
// lease). A failed renewal changes nothing locally; the local deadlines
// then decide.
func (h *heartbeat) beat(quit <-chan struct{}) {
	items := h.held.Live()
	for try := 1; len(items) > 0; try++ {
		busy, err := h.renew(items)
		if err != nil {
			h.report.Error("lease renewal failed", err)
			return
		}
		if len(busy) == 0 || try == busyTries || !sleep(quit, h.busyRetry) {
			return
		}
		items = h.held.StillLive(busy) // not those let go or lost meanwhile
	}
}

// renew renews items in one round trip (more when a statement timeout
// makes it shrink its statements, see stmtsize.WriteRefs) and returns those whose
// rows were busy.
func (h *heartbeat) renew(items []*held.Item) (busy []*held.Item, err error) {
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.Ref()
	}
	ctx, cancel := context.WithTimeout(h.ctx, opTimeout(h.lease))
	defer cancel()
	var sentAt time.Time
	res, err := stmtsize.WriteRefs(h.leaseWrites, h.refSize, len(refs), func(per int) (lease.RefResult, error) {
		sentAt = h.now()
		return h.store.RenewIn(ctx, h.pool, refs, h.lease, per)
	}, func(err error) {
		h.report.Error("lease renewal ran out of time; renewing in smaller statements", err)
	})
	if err != nil {
		return nil, err
	}
	h.held.Renewed(items, res, sentAt)
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
