package pgwatermill

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Subscriber is a Watermill message.Subscriber over pgoutbox dispatchers:
// each Subscribe call runs a dispatcher that claims the events of one
// type from the one outbox table and hands them out as messages. It is
// safe for concurrent use.
type Subscriber struct {
	pool    *pgxpool.Pool
	cfg     SubscriberConfig
	closing chan struct{} // closed by Close

	mu     sync.Mutex
	closed bool
	subs   sync.WaitGroup // one per running subscription
	errs   []error        // the subscriptions' stop errors

	closeOnce sync.Once
	closeErr  error
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber whose subscriptions dispatch from the
// outbox table of cfg.Dispatcher on pool. A nil pool gives an
// *outbox.InputError naming "pool", an invalid cfg an *outbox.ConfigError
// (those of dispatcher.New included).
func NewSubscriber(pool *pgxpool.Pool, cfg SubscriberConfig) (*Subscriber, error) {
	if pool == nil {
		return nil, &outbox.InputError{Field: "pool", Reason: "is nil"}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := dispatcher.New(pool, cfg.Dispatcher); err != nil { // reject a bad config now, not at Subscribe
		return nil, err
	}
	return &Subscriber{pool: pool, cfg: cfg, closing: make(chan struct{})}, nil
}

// Subscribe starts a dispatcher that claims the events of type topic and
// returns the channel it hands them out on, one message per event (see
// the package documentation for the mapping and the acknowledgements). It
// returns once the dispatcher's start-up checks passed, with their error
// otherwise. The channel is closed once the subscription has stopped:
// when ctx ends or Close is called, every message not yet acknowledged is
// given back (PENDING again, no attempt spent; an Ack that comes later
// changes nothing) and the outcomes are recorded. Each message's Context
// carries ctx's values and ends once its Ack or Nack has been taken
// (the dispatcher then records the outcome) or the subscription stops.
// After Close, or when Close comes during its start-up checks (which it
// then stops), it returns [ErrClosed].
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	out, err := s.subscribe(ctx, topic)
	if err != nil {
		s.subs.Done()
	}
	return out, err
}

// begin counts a subscription in, unless the Subscriber is closed.
func (s *Subscriber) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.subs.Add(1)
	return nil
}

func (s *Subscriber) subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	d, err := dispatcher.New(s.pool, s.cfg.Dispatcher)
	if err != nil {
		return nil, err
	}
	out := newOutlet()
	if err := d.Handle(topic, handler(out)); err != nil {
		return nil, &originError{context: "pgwatermill: subscribe", err: err}
	}
	if err := s.start(ctx, d, topic); err != nil {
		return nil, err
	}
	go s.watch(ctx, d, out)
	return out.ch, nil
}

// start starts d; a Close meanwhile stops its start-up checks, which
// would otherwise keep Close waiting as long as the database does not
// answer, and gives ErrClosed.
func (s *Subscriber) start(ctx context.Context, d *dispatcher.Dispatcher, topic string) error {
	started := make(chan struct{})
	defer close(started)
	go func() {
		select {
		case <-s.closing:
			now, cancel := context.WithCancel(context.Background())
			cancel()
			_ = d.Stop(now) // asks for the stop without waiting for it
		case <-started:
		}
	}()
	err := d.Start(ctx)
	select {
	case <-s.closing:
		if err != nil {
			return ErrClosed
		}
	default:
	}
	if err != nil {
		return &originError{context: fmt.Sprintf("pgwatermill: subscribe to topic %q", topic), err: err}
	}
	return nil
}

// watch stops d when ctx ends or the Subscriber closes, and then closes
// out, even when the stop outlived CloseTimeout: a handler still running
// then finds out shut and gives its event back.
func (s *Subscriber) watch(ctx context.Context, d *dispatcher.Dispatcher, out *outlet) {
	defer s.subs.Done()
	select {
	case <-ctx.Done():
	case <-s.closing:
	case <-d.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CloseTimeout)
	defer cancel()
	// With NoDrain every stop with a handler in flight ends in
	// ErrDrainTimeout: the normal case, not an error of Close's, unless
	// the stop outlived CloseTimeout (which wraps it too, and the
	// deadline). Stop's error, not stopCtx.Err(), says which: the
	// deadline may pass just after a stop that ended in time.
	if err := d.Stop(stopCtx); err != nil && (!errors.Is(err, dispatcher.ErrDrainTimeout) || errors.Is(err, context.DeadlineExceeded)) {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	out.close()
}

// handler hands each event out on out as a message and waits for its
// Ack (nil: SENT) or Nack (ErrNacked: a retry). When its context ends
// first, the dispatcher decides: at a stop (NoDrain) the event goes back
// unspent; past HandlerTimeout, a message never taken from out is
// snoozed (given back without spending an attempt, since the consumer
// never saw it) and one taken and not acknowledged is retried.
func handler(out *outlet) outbox.Handler {
	return func(ctx context.Context, e outbox.Event) error {
		msg := toMessage(e)
		msgCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		msg.SetContext(msgCtx)
		if err := out.send(ctx, msg); err != nil {
			return err
		}
		select {
		case <-msg.Acked():
			return nil
		case <-msg.Nacked():
			return ErrNacked
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// outlet is a subscription's output channel. It counts the handlers
// sending on it, so that close closes the channel once, after the last
// send: a handler that comes after the subscription stopped (its stop
// outlived CloseTimeout) gives its event back instead of sending.
type outlet struct {
	ch   chan *message.Message
	shut chan struct{} // closed by close, before ch

	mu      sync.Mutex
	closed  bool
	sending sync.WaitGroup
}

func newOutlet() *outlet {
	return &outlet{ch: make(chan *message.Message), shut: make(chan struct{})}
}

// send hands msg to the consumer. It returns nil once msg was taken,
// else the error that gives the event back (see untaken). A handler
// that finds the subscription stopped (it came after a stop that
// outlived CloseTimeout) waits for its context, which the stop under way
// cancels (NoDrain), so that the event goes back as at any stop.
func (o *outlet) send(ctx context.Context, msg *message.Message) error {
	if o.deliver(ctx, msg) {
		return nil
	}
	<-ctx.Done()
	return untaken(ctx)
}

// deliver sends msg on the channel and reports whether the consumer took
// it before ctx ended or the outlet closed.
func (o *outlet) deliver(ctx context.Context, msg *message.Message) bool {
	if !o.enter() {
		return false
	}
	defer o.sending.Done()
	select {
	case o.ch <- msg:
		return true
	case <-ctx.Done():
	case <-o.shut:
	}
	return false
}

// enter counts a sender in, unless the outlet is closed.
func (o *outlet) enter() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.sending.Add(1)
	return true
}

// close makes every later send give its event back, waits for the
// senders under way and closes the channel.
func (o *outlet) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	close(o.shut)
	o.sending.Wait()
	close(o.ch)
}

// untaken is a handler's result for a message the consumer never took,
// once ctx ended: outbox.Snooze(0) past HandlerTimeout (no attempt
// spent: the consumer never saw it), else the stop's cause, which gives
// the event back unspent.
func untaken(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return outbox.Snooze(0)
	}
	return context.Cause(ctx)
}

// Close stops every subscription: each gives back the messages not yet
// acknowledged (PENDING again, no attempt spent) and records the
// outcomes, within CloseTimeout, and then its channel is closed. Close
// waits for all of them and returns their errors joined: nil normally;
// for a stop that outlived CloseTimeout (a handler middleware that
// ignores its context) an error matching context.DeadlineExceeded that
// names the handler calls still running, whose events go back when they
// return (their channel is closed already). Later calls return the same result; Subscribe returns [ErrClosed]
// after it.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.subs.Wait()
		s.mu.Lock()
		s.closeErr = errors.Join(s.errs...)
		s.mu.Unlock()
	})
	return s.closeErr
}
