package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// This file is the seam between the public relay and its services
// (internal/relay/store, ticker, read, lanes, retention): the relay knows
// them only through the small shapes below, and newServices and
// newGroupStore are the one place that builds the real ones.

// service is one of the relay's goroutines: the ticker, retention, the
// reader (and the relay's own lag sampler). Run starts them in order and
// stops them in reverse.
type service struct {
	// name names it in logs and errors.
	name string
	// run runs it until ctx ends, returning nil or ctx's error then, or
	// earlier with the error that ended it (a *StopError when the group
	// stopped).
	run func(ctx context.Context) error
	// drain, when set, asks run to return once the work in flight is
	// recorded (the reader: the batch in flight acked or parked and its
	// cursor moved); the relay cancels run's ctx if that takes longer than
	// the drain allows. nil: a stop cancels ctx at once.
	drain func()
}

// sample is what the lag sampler reads from the database for Health and
// the gauges.
type sample struct {
	// LagEvents is last_seq(newest tick) - last_seq(cursor tick).
	LagEvents int64
	// LagSeconds is the age of the first tick after the cursor that holds
	// events; 0 when caught up.
	LagSeconds float64
	// TickAge is the age of the newest tick (database clock).
	TickAge time.Duration
	// KeysParked is the group's parked keys.
	KeysParked int64
}

// services is what a relay runs, built by newServices.
type services struct {
	// verify compares the log's schema with what this version needs
	// (migrations.Verify with outbox.KindLog); skipped with SkipVerify.
	// nil: nothing to verify.
	verify func(ctx context.Context) error
	// check runs the other start-up checks (the group exists and is not
	// stopped, head-room of at least one part, privileges). nil: none.
	check func(ctx context.Context) error
	// parts are the services, started in order and stopped in reverse:
	// ticker (unless NoTicker), retention (unless NoRetention), reader.
	parts []service
	// sample reads the lag (store.Lag and ParkedKeys); nil: no sampler.
	sample func(ctx context.Context) (sample, error)
	// tickerHeld and groupHeld report whether this relay holds the
	// ticker's and the group's lease now; nil: false.
	tickerHeld, groupHeld func() bool
	// circuit is the lanes' circuit (lanes.Circuit); nil: closed.
	circuit func() (circuit.State, time.Time)
	// close frees what the services hold (lanes.Close) once they ended;
	// nil: nothing.
	close func()
}

// newServices builds the relay's services for cfg, reporting through rec.
// wired at merge: until then it returns errNotWired. The wiring is:
//
//	st, err := store.New(cfg.Pool, cfg.Log)
//	ln, err := lanes.New(lanes.Config{Publisher: cfg.Publisher, Route: cfg.RouteFunc, Lanes: cfg.Lanes,
//		KeyRetries: cfg.KeyRetries, RetryMin: cfg.KeyRetryMin, RetryMax: cfg.KeyRetryMax,
//		PublishTimeout: cfg.PublishTimeout, CircuitMinBackoff: cfg.CircuitMinBackoff,
//		CircuitMaxBackoff: cfg.CircuitMaxBackoff, ProbeSize: cfg.CircuitProbeSize,
//		OnPublish: rec.OnPublish, OnError: rec.OnError})
//	tk := ticker.New(ticker.Config{Store: st, Owner: cfg.Owner, Interval: cfg.TickInterval,
//		Idle: cfg.IdleTick, Lease: cfg.TickerLease, OnTick: rec.OnTick, OnError: rec.OnError})
//	rd := read.New(read.Config{Store: st, Lanes: ln, Group: cfg.Group, Owner: cfg.Owner,
//		Lease: cfg.GroupLease, MaxBatch: cfg.MaxBatch, PollInterval: cfg.TickInterval,
//		OnBatch: func(b read.BatchStats) { rec.OnBatch(batchReport{...}) }, OnError: rec.OnError})
//	rt := retention.New(...) // unless cfg.NoRetention; reports rec.OnHeadroom
//	return services{verify: migrations.Verify(ctx, cfg.Pool, migrations.Config{Table: cfg.Log, Kind: outbox.KindLog}),
//		parts: [ticker (unless NoTicker), retention, reader], sample: st.Lag + st.ParkedKeys,
//		tickerHeld: tk.Held, circuit: ln.Circuit, close: ln.Close}, nil
func newServices(cfg Config, rec *recorder) (services, error) {
	_, _ = cfg, rec
	return services{}, errNotWired
}

// groupStore creates and drops consumer groups: store.Store's methods.
type groupStore interface {
	CreateGroup(ctx context.Context, group string, from From) error
	DropGroup(ctx context.Context, group string) error
}

// newGroupStore returns the group store of log through pool.
// wired at merge: store.New(pool, log), with From converted to
// store.From (the same values). Until then it returns errNotWired.
func newGroupStore(pool *pgxpool.Pool, log outbox.Table) (groupStore, error) {
	_, _ = pool, log
	return nil, errNotWired
}
