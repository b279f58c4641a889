package lanes

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/circuit"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrClosed is returned by Publish after Close, and by a Publish that
// Close cut short.
var ErrClosed = errors.New("pgoutbox: relay lanes closed")

// Lanes publishes the batches of one consumer group. Publish calls are
// serialized: give it the group's batches in order, from one goroutine.
type Lanes struct {
	cfg        Config
	keyOrdered bool
	backoff    outbox.Backoff
	circuit    *circuit.Circuit
	gate       gate

	quit context.Context
	stop context.CancelCauseFunc

	mu    sync.Mutex // held by Publish: one batch at a time
	lanes []*lane    // under mu: each lane's buffers, kept from batch to batch
}

// New returns the lanes for cfg, or an *outbox.ConfigError naming the
// field out of range.
func New(cfg Config) (*Lanes, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Lanes{cfg: cfg, backoff: outbox.Backoff{Initial: cfg.RetryMin, Multiplier: 2, Max: cfg.RetryMax}}
	if kp, ok := cfg.Publisher.(outbox.KeyOrderedPublisher); ok {
		l.keyOrdered = kp.PublishesKeysInOrder()
	}
	l.gate.init()
	l.circuit = circuit.New(circuit.Config{MinBackoff: cfg.CircuitMinBackoff, MaxBackoff: cfg.CircuitMaxBackoff,
		ProbeSize: cfg.ProbeSize, WakeFunc: l.gate.open, Clock: cfg.Clock})
	l.quit, l.stop = context.WithCancelCause(context.Background())
	l.lanes = make([]*lane, cfg.Lanes)
	for i := range l.lanes {
		l.lanes[i] = &lane{l: l, index: make(map[string]int32)}
	}
	return l, nil
}

// Result is what became of a batch's events: each was published (acked),
// parked or skipped.
type Result struct {
	// Published counts the events the publisher acknowledged.
	Published int
	// Skipped counts the events whose Route was empty: not published by
	// this group, done all the same.
	Skipped int
	// Parked is the events set aside, in seq order: those of a key that
	// was parked already (Code CodeKeyParked), those refused for good or
	// whose retries ran out (the publisher's code), and the later events
	// of their keys in the batch (CodeKeyParked).
	Parked []batch.Parked
	// NewKeys is the keys this batch parked, sorted, "" for events
	// without a key (parked alone: "" parks no other event, but its row
	// lets an operator replay or skip them). The first of
	// Parked with each key carries the failure's code and text.
	NewKeys []string
	// Retries counts the messages published again after a transient
	// failure.
	Retries int
}

// Publish delivers events (one batch, in seq order) and returns when
// every one is acked, parked or skipped. parked is the keys parked
// already: their events are parked without publishing. While the circuit
// is open Publish waits for the destination (the batch stays in memory).
// When ctx ends, or Close is called, it returns promptly with an error
// matching ctx's cause (or ErrClosed) and no Result: the caller must not
// move its cursor, and publishes the batch again later (at-least-once).
func (l *Lanes) Publish(ctx context.Context, events []batch.Event, parked map[string]bool) (Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.quit.Err() != nil {
		return Result{}, ErrClosed
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(l.quit, func() { cancel(ErrClosed) })()

	var res Result
	lanes := l.split(events, parked, &res)
	defer func() {
		for _, ln := range lanes {
			ln.reset()
		}
	}()
	l.runAll(ctx, lanes)
	if err := context.Cause(ctx); err != nil {
		return Result{}, errtext.Wrap(err, "publish a batch of %d events", len(events))
	}
	for _, ln := range lanes {
		res.Published += ln.published
		res.Retries += ln.retries
		res.Parked = append(res.Parked, ln.parked...)
		res.NewKeys = append(res.NewKeys, ln.newKeys...)
	}
	slices.SortFunc(res.Parked, func(a, b batch.Parked) int { return cmp.Compare(a.Event.Seq, b.Event.Seq) })
	slices.Sort(res.NewKeys)
	res.NewKeys = slices.Compact(res.NewKeys) // "" once, however many keyless events parked
	return res, nil
}

// split deals the events to their lanes, parks those of parked keys and
// counts the skipped ones in res.
func (l *Lanes) split(events []batch.Event, parked map[string]bool, res *Result) []*lane {
	for i := range events {
		e := &events[i]
		key := e.Key()
		if key != "" && parked[key] {
			res.Parked = append(res.Parked, parkedEvent(e, key, CodeKeyParked, "its key is parked"))
			continue
		}
		dest := l.cfg.Route(e.Event)
		if dest == "" {
			res.Skipped++
			continue
		}
		l.lanes[laneOf(key, e.Seq, len(l.lanes))].add(e, key, dest)
	}
	var lanes []*lane
	for _, ln := range l.lanes {
		if len(ln.items) > 0 {
			lanes = append(lanes, ln)
		}
	}
	return lanes
}

// runAll runs the lanes at once and waits for them all.
func (l *Lanes) runAll(ctx context.Context, lanes []*lane) {
	if len(lanes) == 1 {
		lanes[0].run(ctx)
		return
	}
	var wg sync.WaitGroup
	for _, ln := range lanes {
		wg.Go(func() { ln.run(ctx) })
	}
	wg.Wait()
}

// laneOf is the lane of an event: FNV-1a of its key, or its seq when it
// has no key, modulo n.
func laneOf(key string, seq int64, n int) int {
	if key == "" {
		return int(uint64(seq) % uint64(n))
	}
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// Circuit returns the state of the group's circuit and since when it is
// not closed (zero while closed).
func (l *Lanes) Circuit() (state circuit.State, since time.Time) {
	return l.circuit.Snapshot()
}

// Close stops the circuit's timer and makes a running Publish return
// ErrClosed; later calls return ErrClosed at once. It is idempotent.
func (l *Lanes) Close() {
	l.stop(ErrClosed)
	l.circuit.Stop()
}

// gate wakes the lanes waiting for the circuit: open closes the current
// channel and makes a new one, so a lane that took the channel before
// asking the circuit never misses a wake-up.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *gate) init() { g.ch = make(chan struct{}) }

// wait returns the channel that the next open closes.
func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

// open wakes every waiting lane.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.ch)
	g.ch = make(chan struct{})
}
