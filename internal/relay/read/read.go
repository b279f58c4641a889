package read

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// Defaults of Config.
const (
	DefaultLease         = 30 * time.Second
	DefaultMaxBatch      = 5000
	DefaultPollInterval  = 100 * time.Millisecond
	DefaultRequestsEvery = 10
)

// Result is what the publisher did with a batch: the fields of
// lanes.Result the reader needs.
type Result struct {
	// Published counts the events acknowledged.
	Published int
	// Parked is the events set aside, in seq order.
	Parked []batch.Parked
	// NewKeys is the keys this batch parked; the first event of Parked
	// with each key carries the failure's code and text.
	NewKeys []string
	// Retries counts the messages published again after a transient
	// failure.
	Retries int
}

// Publisher delivers a batch's events (seq order) and returns when each
// is acked or parked, or with an error when ctx ends (then nothing may
// be moved). parked is the keys parked already. internal/relay/lanes is
// the production one.
type Publisher interface {
	Publish(ctx context.Context, events []batch.Event, parked map[string]bool) (Result, error)
}

// Config configures a Reader.
type Config struct {
	// Store is the log's store. Required.
	Store *store.Store
	// Lanes publishes the batches. Required.
	Lanes Publisher
	// Group is the consumer group read. Required.
	Group string
	// Owner names this relay in the cursor row.
	Owner string
	// Lease is the group lease's length, renewed every third of it.
	// Defaults to 30s.
	Lease time.Duration
	// MaxBatch bounds the events of a batch. Defaults to 5,000.
	MaxBatch int
	// PollInterval is the wait for a new tick when the group is caught up
	// (Wake ends it early). Defaults to 100ms.
	PollInterval time.Duration
	// NoReadAhead turns off reading the next batch while one publishes
	// (two batches are then never in memory at once). Defaults to false.
	NoReadAhead bool
	// Wake, when not nil, says a tick was recorded (the ticker in the
	// same process).
	Wake <-chan struct{}
	// RequestsEvery is how many batches pass between two reads of the
	// operators' replay and skip requests on parked keys; they are read
	// at every poll too while the group is caught up. Defaults to 10.
	RequestsEvery int
	// Clock tells the time; the zero Clock is the wall clock.
	Clock clock.Clock
	// OnSettle is called after the requests on parked keys that a batch
	// boundary carried out were recorded. May be nil.
	OnSettle func(SettleStats)
	// OnBatch is called after each cursor move. May be nil.
	OnBatch func(BatchStats)
	// OnError is called with each error the reader goes on after (a
	// failed statement, a lease lost). May be nil.
	OnError func(error)
}

// BatchStats describes one batch whose cursor move committed.
type BatchStats struct {
	// From and To are the batch's cursor and target ticks.
	From, To int64
	// Events is the batch's size, Published and Parked what became of
	// its events and of the parked events replayed with it (see
	// SettleStats).
	Events, Published, Parked int
	// NewKeys is how many keys the batch parked; Retries how many
	// messages it published again after a transient failure.
	NewKeys, Retries int
	// Partial says the batch was cut at MaxBatch.
	Partial bool
	// Took is the time from the read to the committed move.
	Took time.Duration
}

// SettleStats describes the requests on parked keys one batch boundary
// carried out (in its cursor move, or alone when there was no batch).
type SettleStats struct {
	// Replayed is how many parked events were published again (or
	// parked again, see Reparked).
	Replayed int
	// Unparked is how many keys were replayed or skipped and are no
	// longer parked; Reparked how many were replayed and parked again (an
	// event failed again: the key keeps its rows, with the new error).
	Unparked, Reparked int
	// Cleared is how many requests named a key the group had not parked
	// and were cleared.
	Cleared int
}

// StopError is Run's error when the group stopped: its snapshots went
// backwards, its database changed, or an operator's stop was found.
type StopError struct {
	Group, Reason string
	Err           error
}

func (e *StopError) Error() string {
	return fmt.Sprintf("pgoutbox: consumer group %q stopped: %s", e.Group, errtext.Trim(e.Reason))
}

// Unwrap returns the cause (store.ErrSnapshotBackwards,
// or store.ErrGroupStopped).
func (e *StopError) Unwrap() error { return e.Err }

// Reader reads one consumer group.
type Reader struct {
	cfg   Config
	token uuid.UUID
	// held says the reader holds the group's lease now.
	held atomic.Bool
	// drain is closed by Drain: Run returns once the batch in flight
	// is recorded.
	drain     chan struct{}
	drainOnce sync.Once
	// batches counts the batch boundaries since the requests were last
	// read, and idleRead is when an idle reader last read them (Run's
	// goroutine only).
	batches  int
	idleRead time.Time
	// moves counts the cursor moves; failedAt is its value at hold's last
	// failure and failWait the pause then (Run's goroutine only).
	moves, failedAt uint64
	failWait        time.Duration
}

// New returns a Reader with cfg's defaults applied. It panics when Store,
// Lanes or Group is missing.
func New(cfg Config) *Reader {
	if cfg.Store == nil || cfg.Lanes == nil || cfg.Group == "" {
		panic("read: Config needs Store, Lanes and Group")
	}
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, DefaultMaxBatch)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.RequestsEvery = cmp.Or(cfg.RequestsEvery, DefaultRequestsEvery)
	return &Reader{cfg: cfg, token: uuid.New(), drain: make(chan struct{})}
}

// Held reports whether the reader holds its group's lease now.
func (r *Reader) Held() bool { return r.held.Load() }

// Drain asks Run to return once the batch in flight (if any) is
// published and its cursor moved, releasing the lease; it does not wait.
// Run still returns at once when its ctx ends.
func (r *Reader) Drain() { r.drainOnce.Do(func() { close(r.drain) }) }

// errDrained ends hold when Drain was called.
var errDrained = errors.New("read: drained")

// errLeaseLost is the cause of a held context's end when the lease was
// lost or its trust ran out.
var errLeaseLost = store.ErrLeaseLost

// Run reads the group until ctx ends (then it releases the lease and
// returns nil) or the group stops (a *StopError). ErrNoGroup is returned
// as is.
func (r *Reader) Run(ctx context.Context) error {
	for {
		cur, err := r.take(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errDrained) {
				return nil
			}
			return err
		}
		r.held.Store(true)
		err = r.hold(ctx, cur)
		r.held.Store(false)
		if ctx.Err() != nil || errors.Is(err, errDrained) {
			r.release()
			return nil
		}
		var stop *StopError
		if errors.As(err, &stop) {
			return err
		}
		r.report(ctx, err)
		// Take the lease again, at once when it was lost; after any other
		// failure (a move refused, a read that failed) only after a pause
		// that doubles while no batch moves, so that a failure that
		// repeats does not republish the same batch in a loop.
		if !errors.Is(err, errLeaseLost) {
			if err := r.pause(ctx, r.backoff()); err != nil {
				if errors.Is(err, errDrained) {
					r.release()
				}
				return nil
			}
		}
	}
}

// backoff is the pause after a failure of hold: PollInterval, doubling
// while no batch moved since the last failure, up to a third of Lease.
func (r *Reader) backoff() time.Duration {
	if r.moves != r.failedAt {
		r.failedAt, r.failWait = r.moves, 0
	}
	r.failWait = min(max(2*r.failWait, r.cfg.PollInterval), r.cfg.Lease/3)
	return r.failWait
}

// take takes the group's lease, trying again every third of Lease while
// another reader holds it.
func (r *Reader) take(ctx context.Context) (batch.Cursor, error) {
	for {
		cur, err := r.cfg.Store.TakeGroup(ctx, r.cfg.Group, r.cfg.Owner, r.token, r.cfg.Lease)
		switch {
		case err == nil:
			return cur, nil
		case errors.Is(err, store.ErrSnapshotBackwards):
			return batch.Cursor{}, r.stop(ctx, err)
		case errors.Is(err, store.ErrGroupStopped):
			return batch.Cursor{}, &StopError{Group: r.cfg.Group, Reason: err.Error(), Err: err}
		case errors.Is(err, store.ErrNoGroup):
			return batch.Cursor{}, err
		case !errors.Is(err, store.ErrGroupBusy):
			r.report(ctx, err)
		}
		if err := r.pause(ctx, r.cfg.Lease/3); err != nil {
			return batch.Cursor{}, err
		}
	}
}

// stop records err as the group's stop reason and returns the
// *StopError.
func (r *Reader) stop(ctx context.Context, err error) error {
	if serr := r.cfg.Store.StopGroup(ctx, r.cfg.Group, r.token, err.Error()); serr != nil {
		r.report(ctx, serr)
	}
	return &StopError{Group: r.cfg.Group, Reason: err.Error(), Err: err}
}

// hold reads batches while the lease is held: it returns when ctx ends,
// the lease is lost (an error) or the group stops (a *StopError).
func (r *Reader) hold(ctx context.Context, cur batch.Cursor) error {
	held, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.renew(held, cancel) }()
	defer wg.Wait()
	defer cancel(nil)

	parked, err := r.cfg.Store.ParkedKeys(held, r.cfg.Group)
	if err != nil {
		return err
	}
	var f flow
	defer f.close()
	for {
		next, more, err := r.once(held, cur, parked, &f)
		if err != nil {
			if cause := context.Cause(held); held.Err() != nil && ctx.Err() == nil {
				return cause
			}
			return err
		}
		cur = next
		select {
		case <-r.drain:
			return errDrained
		default:
		}
		if more {
			continue
		}
		if err := r.wait(held); err != nil {
			return err
		}
	}
}

// renew renews the lease every third of Lease until held ends; when the
// lease is lost, or not renewed for Lease, it ends held with
// errLeaseLost.
func (r *Reader) renew(held context.Context, cancel context.CancelCauseFunc) {
	trustUntil := r.cfg.Clock.Now().Add(r.cfg.Lease)
	every := r.cfg.Clock.NewTicker(r.cfg.Lease / 3)
	defer every.Stop()
	for {
		select {
		case <-held.Done():
			return
		case <-every.C:
		}
		start := r.cfg.Clock.Now()
		err := r.cfg.Store.RenewGroup(held, r.cfg.Group, r.token, r.cfg.Lease)
		switch {
		case err == nil:
			trustUntil = start.Add(r.cfg.Lease)
		case errors.Is(err, store.ErrLeaseLost):
			cancel(errtext.Wrap(errLeaseLost, "renew consumer group %q", r.cfg.Group))
			return
		default:
			r.report(held, err)
		}
		if !r.cfg.Clock.Now().Before(trustUntil) {
			cancel(errtext.Wrap(errLeaseLost, "consumer group %q: lease not renewed in time", r.cfg.Group))
			return
		}
	}
}

// StreamSpan is how many times MaxBatch events the target tick of a
// stream may hold when the reader is behind (store.Stream): the events
// are read once and published in pieces of MaxBatch, so merging ticks
// saves statements, while the stream's snapshot is held for the span's
// events only.
const StreamSpan = 8

// flow is the stream the reader publishes piece by piece and its next
// piece, read ahead: hold's, between two calls of once.
type flow struct {
	st   *store.Stream
	next batch.Batch
	err  error // the read of next failed: the stream is dropped
}

// close closes the stream (an unfinished one is cancelled) and forgets
// it.
func (f *flow) close() {
	f.st.Close()
	*f = flow{}
}

// once publishes and moves one piece of a batch: the next piece of the
// stream in *f, or the first piece of the next batch's stream, opened now
// (store.Stream records its target). While the piece publishes it reads
// the one after (unless NoReadAhead), or, after the stream's last piece,
// opens the next batch's stream and reads its first piece, which the
// move records as the open batch. more says another piece may wait at
// once.
func (r *Reader) once(ctx context.Context, cur batch.Cursor, parked map[string]bool, f *flow) (batch.Cursor, bool, error) {
	start := r.cfg.Clock.Mono()
	if f.st == nil {
		st, ok, err := r.cfg.Store.Stream(ctx, r.token, cur, r.span())
		switch {
		case errors.Is(err, store.ErrSnapshotBackwards):
			return cur, false, r.stop(ctx, err)
		case errors.Is(err, store.ErrLeaseLost):
			return cur, false, err
		case err != nil:
			// Its target may be recorded already (the statement failed
			// after it): opened again from cur, a newer tick would make
			// another target, refused as a lost lease. The lease is taken
			// again (after a pause), with the cursor as recorded.
			return cur, false, err
		case !ok:
			return cur, false, r.settleIdle(ctx, cur, parked)
		}
		f.st = st
		f.next, f.err = st.Next(r.cfg.MaxBatch)
		cur.BatchTick = st.To.ID // as Stream recorded it
	}
	if f.err != nil {
		r.report(ctx, f.err)
		f.close()
		return cur, false, nil // the stream opens again from the cursor
	}
	b := f.next
	var s settle
	if r.requestsDue(false) {
		s = r.requests(ctx, parked)
	}
	var read <-chan flow
	if !r.cfg.NoReadAhead {
		read = r.readAhead(ctx, *f, store.Next(cur, b))
	}
	res, err := r.cfg.Lanes.Publish(ctx, withReplay(s.replay, b.Events), parked)
	if read == nil {
		read = r.readAhead(ctx, *f, batch.Cursor{}) // no read ahead: the next piece only, now
	}
	if err != nil {
		*f = <-read
		return cur, false, errtext.Wrap(err, "publish batch of %q", r.cfg.Group)
	}
	var ahead batch.Batch
	if !b.Partial { // the move records the next batch's target
		if *f = <-read; f.st != nil {
			ahead = f.st.Batch()
		}
		read = nil
	}
	moved, err := r.cfg.Store.MoveWith(ctx, r.token, cur, b,
		s.outcome(store.Outcome{Parked: res.Parked, NewKeys: newKeys(res), Ahead: ahead}))
	if read != nil { // the next piece is read while the move commits
		*f = <-read
	}
	if err != nil {
		return cur, false, err
	}
	for _, k := range res.NewKeys {
		parked[k] = true
	}
	r.settled(s, res)
	r.moves++
	if r.cfg.OnBatch != nil {
		r.cfg.OnBatch(BatchStats{From: b.From.ID, To: b.To.ID, Events: len(b.Events), Published: res.Published,
			Parked: len(res.Parked), NewKeys: len(res.NewKeys), Retries: res.Retries, Partial: b.Partial,
			Took: r.cfg.Clock.Elapsed(start)})
	}
	return moved, true, nil
}

// span is the most events a stream's target may hold past the cursor.
func (r *Reader) span() int { return r.cfg.MaxBatch * StreamSpan }

// withReplay is the events of a batch publish: the replayed parked
// events first (the lanes keep each key's events in the order given, so
// a key's replayed events go before its events of the batch), then the
// batch's.
func withReplay(replay, events []batch.Event) []batch.Event {
	if len(replay) == 0 {
		return events
	}
	return append(append(make([]batch.Event, 0, len(replay)+len(events)), replay...), events...)
}

// readAhead reads, on a goroutine of its own, what follows the piece f
// holds: the stream's next piece when more wait, else (the stream
// closed) the stream of the batch from cur, which the piece's move gives,
// and its first piece. A zero cur opens none (no read ahead). The
// channel gives the flow the next once takes: none when there is no
// batch yet or its opening failed (Stream then opens it and reports what
// failed).
func (r *Reader) readAhead(ctx context.Context, f flow, cur batch.Cursor) <-chan flow {
	out := make(chan flow, 1)
	go func() {
		if f.next.Partial {
			f.next, f.err = f.st.Next(r.cfg.MaxBatch)
			out <- f
			return
		}
		f.close()
		if cur.Group == "" {
			out <- flow{}
			return
		}
		st, ok, err := r.cfg.Store.ReadStream(ctx, cur, r.span())
		if err != nil || !ok {
			out <- flow{}
			return
		}
		next, err := st.Next(r.cfg.MaxBatch)
		out <- flow{st: st, next: next, err: err}
	}()
	return out
}

// newKeys returns res's new keys with the code and text of the first
// parked event of each.
func newKeys(res Result) []store.ParkedKey {
	if len(res.NewKeys) == 0 {
		return nil
	}
	first := make(map[string]batch.Parked, len(res.NewKeys))
	for _, p := range res.Parked {
		if _, ok := first[p.Key]; !ok {
			first[p.Key] = p
		}
	}
	out := make([]store.ParkedKey, len(res.NewKeys))
	for i, k := range res.NewKeys {
		out[i] = store.ParkedKey{Key: k, Code: first[k].Code, Err: first[k].Err}
	}
	return out
}

// wait waits for Wake or PollInterval, or ctx's end (its cause).
func (r *Reader) wait(ctx context.Context) error {
	t := r.cfg.Clock.NewTimer(r.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.drain:
		return errDrained
	case <-r.cfg.Wake:
	case <-t.C:
	}
	return nil
}

// pause waits d, or until ctx ends (its cause) or Drain is called
// (errDrained).
func (r *Reader) pause(ctx context.Context, d time.Duration) error {
	t := r.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.drain:
		return errDrained
	case <-t.C:
		return nil
	}
}

// release gives the lease up so that another reader takes the group at
// once.
func (r *Reader) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.cfg.Store.ReleaseGroup(ctx, r.cfg.Group, r.token); err != nil && r.cfg.OnError != nil {
		r.cfg.OnError(err)
	}
}

// report passes err to OnError unless it is only ctx ending.
func (r *Reader) report(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil || r.cfg.OnError == nil {
		return
	}
	r.cfg.OnError(err)
}
