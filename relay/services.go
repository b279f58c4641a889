package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/lanes"
	"github.com/pgoutbox/pgoutbox/internal/relay/read"
	"github.com/pgoutbox/pgoutbox/internal/relay/retention"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/relay/ticker"
	"github.com/pgoutbox/pgoutbox/migrations"
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

// newServices builds the relay's services for cfg, reporting through
// rec: the store (the relay's SQL), the lanes (publishing), the ticker
// (unless NoTicker), retention (unless NoRetention; it runs only while
// this relay holds the ticker lease) and the reader of cfg.Group. A tick
// recorded by this process's ticker wakes its reader at once.
func newServices(cfg Config, rec *recorder) (services, error) {
	st, err := store.New(cfg.Pool, cfg.Log)
	if err != nil {
		return services{}, err
	}
	ln, err := lanes.New(lanes.Config{Publisher: cfg.Publisher, Route: cfg.RouteFunc, Lanes: cfg.Lanes,
		KeyRetries: cfg.KeyRetries, RetryMin: cfg.KeyRetryMin, RetryMax: cfg.KeyRetryMax,
		PublishTimeout: cfg.PublishTimeout, CircuitMinBackoff: cfg.CircuitMinBackoff,
		CircuitMaxBackoff: cfg.CircuitMaxBackoff, ProbeSize: cfg.CircuitProbeSize,
		OnPublish: rec.OnPublish, OnError: rec.OnError})
	if err != nil {
		return services{}, err
	}
	wake := make(chan struct{}, 1)
	svc := services{
		verify: func(ctx context.Context) error {
			if err := addParts(ctx, st, cfg); err != nil {
				return err
			}
			return migrations.Verify(ctx, cfg.Pool, migrations.Config{Table: cfg.Log, Kind: outbox.KindLog})
		},
		check:   func(ctx context.Context) error { return startChecks(ctx, st, cfg, rec) },
		sample:  func(ctx context.Context) (sample, error) { return sampleGroup(ctx, st, cfg.Group) },
		circuit: ln.Circuit,
		close:   ln.Close,
	}
	if !cfg.NoTicker {
		tk := ticker.New(ticker.Config{Store: st, Owner: cfg.Owner, Interval: cfg.TickInterval, Idle: cfg.IdleTick,
			Lease: cfg.TickerLease, OnError: rec.OnError,
			OnTick:  func(id int64) { rec.OnTick(id); poke(wake) },
			OnParts: func(_ int, headroom uint64) { rec.OnHeadroom(headroom) }})
		svc.tickerHeld = tk.Held
		svc.parts = append(svc.parts, service{name: "ticker", run: tk.Run})
		if !cfg.NoRetention {
			rt, err := retention.New(retention.Config{DB: cfg.Pool, Log: cfg.Log, Interval: cfg.RetentionInterval,
				Held: tk.Held, OnError: rec.OnError})
			if err != nil {
				return services{}, err
			}
			svc.parts = append(svc.parts, service{name: "retention", run: rt.Run})
		}
	}
	rd := read.New(read.Config{Store: st, Lanes: lanesPublisher{ln}, Group: cfg.Group, Owner: cfg.Owner,
		Lease: cfg.GroupLease, MaxBatch: cfg.MaxBatch, PollInterval: cfg.TickInterval, Wake: wake,
		OnBatch: func(b read.BatchStats) { rec.OnBatch(batchOf(b)) }, OnError: rec.OnError})
	svc.groupHeld = rd.Held
	svc.parts = append(svc.parts, service{name: "reader", run: readerRun(rd), drain: rd.Drain})
	return svc, nil
}

// poke wakes whoever waits on ch, without blocking when a wake-up is
// pending already.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// readerRun runs rd, giving the relay's *StopError for the reader's.
func readerRun(rd *read.Reader) func(context.Context) error {
	return func(ctx context.Context) error {
		err := rd.Run(ctx)
		var stop *read.StopError
		if errors.As(err, &stop) {
			return &StopError{Group: stop.Group, Reason: stop.Reason, Err: stop.Err}
		}
		return err
	}
}

// batchOf is the recorder's view of a batch the reader recorded.
func batchOf(b read.BatchStats) batchReport {
	return batchReport{From: b.From, To: b.To, Events: b.Events, Published: b.Published, Parked: b.Parked,
		NewKeys: b.NewKeys, Retries: b.Retries, Duration: b.Took}
}

// lanesPublisher is the lanes as the reader's Publisher.
type lanesPublisher struct{ ln *lanes.Lanes }

// Publish publishes events through the lanes.
func (p lanesPublisher) Publish(ctx context.Context, events []batch.Event, parked map[string]bool) (read.Result, error) {
	res, err := p.ln.Publish(ctx, events, parked)
	return read.Result{Published: res.Published, Parked: res.Parked, NewKeys: res.NewKeys, Retries: res.Retries}, err
}

// addParts adds the parts missing ahead when the relay runs a ticker, as
// its ticker would: before Verify, which counts a log without a part for
// new transactions as a schema problem.
func addParts(ctx context.Context, st *store.Store, cfg Config) error {
	if cfg.NoTicker {
		return nil
	}
	_, _, err := st.AddParts(ctx)
	return errtext.Wrap(err, "relay")
}

// startChecks refuses to start without the group (Run would wait for it
// forever otherwise) or without a part for new transactions (every Emit
// into the log would fail).
func startChecks(ctx context.Context, st *store.Store, cfg Config, rec *recorder) error {
	if _, err := st.Lag(ctx, cfg.Group); err != nil {
		return errtext.Wrap(err, "relay: consumer group %q (create it with relay.CreateGroup or outboxctl relay group create)", cfg.Group)
	}
	if err := addParts(ctx, st, cfg); err != nil {
		return err
	}
	headroom, err := st.CheckParts(ctx)
	if err != nil {
		return errtext.Wrap(err, "relay")
	}
	rec.OnHeadroom(headroom)
	return nil
}

// sampleGroup reads the group's lag and parked keys.
func sampleGroup(ctx context.Context, st *store.Store, group string) (sample, error) {
	lag, err := st.Lag(ctx, group)
	if err != nil {
		return sample{}, err
	}
	keys, err := st.ParkedKeys(ctx, group)
	if err != nil {
		return sample{}, err
	}
	return sample{LagEvents: lag.Events, LagSeconds: lag.Seconds, TickAge: lag.TickAge, KeysParked: int64(len(keys))}, nil
}

// groupStore creates and drops consumer groups: store.Store's methods.
type groupStore interface {
	CreateGroup(ctx context.Context, group string, from store.From) error
	DropGroup(ctx context.Context, group string) error
}

// newGroupStore returns the group store of log through pool.
func newGroupStore(pool *pgxpool.Pool, log outbox.Table) (groupStore, error) {
	return store.New(pool, log)
}
