package keeper

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/held"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/report"
	"github.com/pgoutbox/pgoutbox/internal/stmtsize"
)

// Config is what a Keeper needs from the dispatcher.
type Config struct {
	// Ctx bounds the Keeper's statements: the dispatcher's own, never
	// cancelled (each statement has its own timeout).
	Ctx context.Context
	// Held is the dispatcher's held set: the leases to renew, the marks
	// to write, the calls to watch.
	Held *held.Set
	// Report counts and reports errors and overruns.
	Report *report.Reporter
	// Store and Pool write the renewals and start marks.
	Store *lease.Store
	Pool  *pgxpool.Pool
	// Logger, Table and Owner are the WARN of an overrun and the names it
	// gives (the dispatcher's Config.Logger, Table and Owner).
	Logger *slog.Logger
	Table  string
	Owner  string
	// Clock is the dispatcher's clock (the held set's): a renewal credits
	// the time it was sent by its Now (the local lease deadlines, which
	// tests replace); the overruns read its real time (Mono), as the held
	// set times handler calls; beats and retries of busy rows wait real
	// time.
	Clock clock.Clock
	// Lease is the dispatcher's LeaseDuration: each renewal extends the
	// leases by it, and the heartbeat beats every third of it.
	Lease time.Duration
	// OpTimeout bounds each statement.
	OpTimeout time.Duration
	// AtLeastOnce is true under Delivery AtLeastOnce (see
	// lease.Store.StartIn).
	AtLeastOnce bool
	// BusyRetry is how soon rows locked elsewhere are tried again.
	// Defaults to BusyRetry (tests wait longer).
	BusyRetry time.Duration
}

// BusyRetry is how soon the marker, the heartbeat and releases try again
// a row that was locked elsewhere.
const BusyRetry = 20 * time.Millisecond

// BusyTries bounds the tries of a release, or of a beat, whose rows are
// busy.
const BusyTries = 5

// Keeper keeps this dispatcher's leases: the heartbeat renews them, the
// marker writes start marks, and it watches the calls that overrun their
// timeout. It owns the lock that keeps its renewals and start marks, and
// the completer's releases, from running at once (LeaseWrites).
type Keeper struct {
	cfg Config
	// leaseWrites keeps this dispatcher's renewals, start marks and
	// releases from running at once: they skip rows locked elsewhere, and
	// must not find each other's. It is never held while held.Set.mu or
	// the dispatcher's mu is taken, nor taken while they are held.
	leaseWrites sync.Mutex
	// refSize bounds the statements of renewals and start marks (refs
	// per statement), shrunk by statement timeouts (see stmtsize.WriteRefs).
	// Guarded by leaseWrites.
	refSize stmtsize.Size
}

// New returns a Keeper of cfg, not running yet.
func New(cfg Config) *Keeper {
	if cfg.BusyRetry == 0 {
		cfg.BusyRetry = BusyRetry
	}
	return &Keeper{cfg: cfg, refSize: stmtsize.New(lease.MaxRefsPerStatement)}
}

// LeaseWrites is the lock a release takes around its statement, so that
// it never runs beside this Keeper's renewals and start marks (see
// Keeper).
func (k *Keeper) LeaseWrites() sync.Locker { return &k.leaseWrites }

// Run runs the heartbeat and the marker until quit ends, and returns when
// both have returned.
func (k *Keeper) Run(quit context.Context) {
	var loops sync.WaitGroup
	loops.Go(func() { k.heartbeat(quit) })
	loops.Go(func() { k.markLoop(quit) })
	loops.Wait()
}

// opContext bounds one statement of the Keeper.
func (k *Keeper) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(k.cfg.Ctx, k.cfg.OpTimeout)
}

// refsOf returns the refs of items.
func refsOf(items []*held.Item) []lease.Ref {
	refs := make([]lease.Ref, len(items))
	for i, it := range items {
		refs[i] = it.Ref()
	}
	return refs
}
