package dispatcher

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// The marker. Start marks (which events a claim marks started, and why:
// see internal/run/slots.go) that a claim did not write are written here:
// a handler slot's event waits in the held set (held.Set.QueueMarks) until
// the marker writes its mark, all waiting ones in one statement.

// busyRetry is how soon the marker tries again an event whose row was
// locked elsewhere.
const busyRetry = 20 * time.Millisecond

// markLoop is the marker: it writes the start marks that handler slots
// wait for, all waiting ones in one statement.
func (d *Dispatcher) markLoop(quit <-chan struct{}) {
	serveLoop(quit, d.held.MarksWanted(), func() time.Duration {
		if d.markOnce() {
			return busyRetry
		}
		return 0
	})
}

// markOnce writes the waiting marks. It reports whether some must be
// tried again (their rows were busy, or the write failed).
func (d *Dispatcher) markOnce() (again bool) {
	items := d.held.TakeMarks()
	if len(items) == 0 {
		return false
	}
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.Ref()
	}
	ctx, cancel := d.opContext()
	defer cancel()
	res, err := stmtsize.WriteRefs(&d.leaseWrites, &d.refSize, len(refs), func(per int) (lease.RefResult, error) {
		return d.store.StartIn(ctx, d.pool, refs, d.cfg.Delivery == AtLeastOnce, per)
	}, func(err error) { d.report.Error("start marks ran out of time; marking in smaller statements", err) })
	if err != nil {
		d.report.Error("start marks failed, will retry", err)
		res = lease.RefResult{Busy: refs}
	}
	return d.held.Marked(items, res)
}
