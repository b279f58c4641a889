package amqppub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Publisher publishes outbox messages to RabbitMQ (AMQP 0-9-1) with
// publisher confirms. It implements [outbox.Publisher] and
// [outbox.KeyOrderedPublisher], and is safe for concurrent use: each
// Publish call runs on a confirm channel of its own.
type Publisher struct {
	cfg  Config
	dial func(ctx context.Context, p DialParams) (*amqp.Connection, io.Closer, error)

	// dialMu serialises dials. Neither it nor mu is held while waiting
	// for the broker, except dialMu during a dial, which ConfirmTimeout
	// bounds: a stalled broker cannot hold Close or other calls.
	dialMu sync.Mutex
	mu     sync.Mutex
	sess   *session          // nil before the first call and after a loss
	idle   []*confirmChannel // channels of sess no call holds, nothing unconfirmed
	closed bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher for the broker cfg names. It does not connect:
// the first Publish dials, and every Publish after a lost connection dials
// again. cfg's zero fields take their defaults; an out-of-range field
// returns an *outbox.ConfigError naming it.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, dial: dial}
	if cfg.DialFunc != nil {
		p.dial = func(ctx context.Context, dp DialParams) (*amqp.Connection, io.Closer, error) {
			conn, err := cfg.DialFunc(ctx, dp)
			return conn, nil, err
		}
	}
	return p, nil
}

// String names the Publisher by its broker, the URL's password
// redacted, so that printing it (a log line that includes it) shows no
// credential.
func (p *Publisher) String() string { return "amqppub.Publisher(" + redact(p.cfg.URL) + ")" }

// GoString is String, for the %#v verb.
func (p *Publisher) GoString() string { return p.String() }

// Route returns where a message for dest carrying e goes: Config.RouteFunc's
// answer when it is set, and otherwise Config.Exchange with
// Config.RoutingKeyPrefix followed by dest as the routing key.
func (p *Publisher) Route(dest string, e outbox.Event) (Route, error) {
	if p.cfg.RouteFunc != nil {
		return p.cfg.RouteFunc(RouteParams{Destination: dest, Event: e})
	}
	return Route{Exchange: p.cfg.Exchange, RoutingKey: p.cfg.RoutingKeyPrefix + dest}, nil
}

// Close closes the connection. Calls in progress fail with a retryable
// error; later calls report [ErrClosed]. It is idempotent. It waits for
// the broker to answer the close for at most Config.ConfirmTimeout; then,
// with the default DialFunc, it closes the socket and returns an error
// wrapping [ErrConnection] (with a DialFunc of the caller's, the close
// goes on in the background until the broker answers or the connection's
// heartbeat gives up).
func (p *Publisher) Close() error {
	p.mu.Lock()
	s := p.sess
	p.closed, p.sess, p.idle = true, nil, nil
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.close(p.cfg.ConfirmTimeout)
}

// take returns an idle channel, or else the current session to open one
// on (nil when there is none or its connection was lost).
func (p *Publisher) take() (*session, *confirmChannel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrClosed
	}
	if p.sess != nil && p.sess.conn.IsClosed() {
		p.sess, p.idle = nil, nil
	}
	if p.sess == nil {
		return nil, nil, nil
	}
	if p.sess.blocked.Load() {
		return nil, nil, ErrBlocked
	}
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !c.ch.IsClosed() {
			return p.sess, c, nil
		}
	}
	return p.sess, nil, nil
}

// connect dials a new session, unless a call that dialled meanwhile
// left one, and makes it the current one.
func (p *Publisher) connect(ctx context.Context) (*session, error) {
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	if s, _, err := p.take(); err != nil || s != nil {
		return s, err
	}
	conn, raw, err := p.dial(ctx, DialParams{URL: p.cfg.URL, Timeout: p.cfg.ConfirmTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrConnection, redact(p.cfg.URL), redactErr(err, p.cfg.URL))
	}
	s := newSession(conn, raw)
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.sess, p.idle = s, nil
	}
	p.mu.Unlock()
	if closed {
		go func() { _ = s.close(p.cfg.ConfirmTimeout) }()
		return nil, ErrClosed
	}
	return s, nil
}

// discard drops s, after a confirm timeout, when it is still
// the current session: the next call dials again rather than wait on a
// connection that may be dead for as long as its heartbeat takes to tell.
// The connection is closed in the background: a close waits for the
// broker's answer, up to ConfirmTimeout.
func (p *Publisher) discard(s *session) {
	p.mu.Lock()
	if p.sess == s {
		p.sess, p.idle = nil, nil
	}
	p.mu.Unlock()
	go func() { _ = s.close(p.cfg.ConfirmTimeout) }()
}

// release gives c back for the next call when clean (every message it
// carried was confirmed and it is open) and there is room, and closes it
// otherwise: a channel with confirms outstanding would hand them to the
// next call. The close runs in the background: it waits for the broker's
// answer, which a stalled or blocked broker does not give (see
// closeChannel).
func (p *Publisher) release(c *confirmChannel, clean bool) {
	p.mu.Lock()
	keep := clean && !p.closed && p.sess == c.s && len(p.idle) < p.cfg.IdleChannels && !c.ch.IsClosed()
	if keep {
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
	if !keep {
		go p.closeChannel(c)
	}
}

// closeChannel closes c, which waits for the broker's answer; when none
// comes within ConfirmTimeout (a broker that stalls but sends heartbeats
// never gives one), it drops c's connection, which ends the wait.
func (p *Publisher) closeChannel(c *confirmChannel) {
	done := make(chan struct{})
	go func() {
		_ = c.ch.Close()
		close(done)
	}()
	t := time.NewTimer(p.cfg.ConfirmTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.discard(c.s)
	}
}

// Publish sends msgs on a confirm channel of its own, pipelining up to
// Config.MaxInFlight of them with the mandatory flag, and waits for the
// broker to confirm each. It returns one error per message, in the order
// of msgs: nil once the broker confirmed (basic.ack) the message and did
// not return it. Failures that retrying cannot fix are wrapped with
// [outbox.Permanent], outages with [outbox.Unavailable]; see the package
// documentation for the classification.
//
// When ctx ends, Publish stops sending and returns at once; every message
// not yet confirmed reports ctx.Err(), wrapped, which is retryable (and
// outbox.Unavailable when ctx's deadline passed). Within one call, the
// messages are published in the order of msgs, on one channel, which
// RabbitMQ routes and enqueues in that order.
//
// With Config.KeyOrder, the messages of one outbox.OrderKey are sent one
// at a time, each after the confirm of the one before; after a key's
// first failure (ctx ending included) the rest of the key reports an
// error wrapping outbox.ErrNotAttempted and is not sent.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	b := &batch{p: p, ctx: ctx, msgs: msgs, errs: make([]error, len(msgs)), routes: make([]Route, len(msgs))}
	b.next, b.ready = runs(msgs, p.cfg.KeyOrder)
	if len(msgs) == 0 {
		return b.errs
	}
	names := b.route()
	if ctx.Err() != nil {
		b.abandon()
		return b.errs
	}
	c, missing, err := p.prepare(ctx, names)
	if err != nil {
		b.failAll(err)
		return b.errs
	}
	b.c, b.missing = c, missing
	b.run()
	p.release(c, b.clean)
	return b.errs
}

// prepared is what prepare found: a channel for the call and the missing
// exchanges, or why there is none.
type prepared struct {
	c       *confirmChannel
	missing map[string]error
	err     error
}

// prepare gets a channel for a call and checks that the exchanges in
// names exist. Dialling, opening a channel and the check wait for the
// broker, which a stalled one may never answer (while it sends
// heartbeats, the connection never times out), so prepare returns when
// ctx ends, or when the broker, once connected, leaves a request
// unanswered for Config.ConfirmTimeout: then the connection is dropped,
// as after a confirm timeout, and prepare reports [ErrConfirmTimeout]. A
// dial bounds itself. The channel, once had, is given back in the
// background.
func (p *Publisher) prepare(ctx context.Context, names []string) (*confirmChannel, map[string]error, error) {
	connected := make(chan (<-chan struct{}), 1)
	done := make(chan prepared, 1)
	go func() { done <- p.open(ctx, names, connected) }()
	var expired <-chan struct{}
	for {
		select {
		case r := <-done:
			return r.c, r.missing, r.err
		case expired = <-connected:
		case <-expired:
			go p.releaseWhenDone(done)
			return nil, nil, errOpenTimeout()
		case <-ctx.Done():
			go p.releaseWhenDone(done)
			return nil, nil, contextCause(ctx)
		}
	}
}

// open gets a channel for a call and checks the exchanges in names. Once
// it has a session, it sends connected the channel its watchdog closes.
func (p *Publisher) open(ctx context.Context, names []string, connected chan<- (<-chan struct{})) prepared {
	s, c, err := p.take()
	if err == nil && s == nil {
		s, err = p.connect(ctx)
	}
	if err != nil {
		return prepared{err: err}
	}
	w := p.watch(s)
	defer w.stop()
	connected <- w.expired
	if c == nil {
		if c, err = s.openChannel(p.cfg.MaxInFlight); err != nil {
			return prepared{err: w.cause(err)}
		}
		w.answered()
	}
	missing, err := s.checkExchanges(names, w.answered)
	if err != nil {
		p.release(c, true)
		return prepared{err: w.cause(err)}
	}
	return prepared{c: c, missing: missing}
}

// watchdog drops a session whose broker leaves a request unanswered for
// Config.ConfirmTimeout, which ends the wait, and then closes expired. It
// runs on its own, so it also bounds the work a call that returned early
// (its ctx ended) leaves behind.
type watchdog struct {
	t       *time.Timer
	d       time.Duration
	expired chan struct{}
}

// watch starts a watchdog on s.
func (p *Publisher) watch(s *session) *watchdog {
	w := &watchdog{d: p.cfg.ConfirmTimeout, expired: make(chan struct{})}
	w.t = time.AfterFunc(w.d, func() {
		close(w.expired)
		p.discard(s)
	})
	return w
}

// answered restarts the wait after the broker answered, unless the
// watchdog already fired.
func (w *watchdog) answered() {
	if w.t.Stop() {
		w.t.Reset(w.d)
	}
}

func (w *watchdog) stop() { w.t.Stop() }

// cause is why a request failed: the confirm timeout when the watchdog
// fired, since its drop of the connection ended the request, err
// otherwise. prepare, which may see the request's end before the
// watchdog's (a loaded machine runs it late), then reports the same.
func (w *watchdog) cause(err error) error {
	select {
	case <-w.expired:
		return errOpenTimeout()
	default:
		return err
	}
}

// errOpenTimeout is the cause of a call whose channel opening or
// exchange check the broker left unanswered for ConfirmTimeout.
func errOpenTimeout() error {
	return fmt.Errorf("%w (opening a channel or checking an exchange)", ErrConfirmTimeout)
}

// releaseWhenDone gives back the channel a prepare that returned early
// still gets.
func (p *Publisher) releaseWhenDone(done <-chan prepared) {
	if r := <-done; r.c != nil {
		p.release(r.c, true)
	}
}

// inflight is one message sent and not yet confirmed.
type inflight struct {
	idx      int
	dc       *amqp.DeferredConfirmation
	deadline time.Time
}

// batch is the state of one Publish call.
type batch struct {
	p        *Publisher
	ctx      context.Context
	c        *confirmChannel
	msgs     []outbox.Message
	errs     []error
	routes   []Route
	invalid  []error // permanent failures found before sending, by index
	missing  map[string]error
	pending  []inflight                  // in send order
	ready    []int                       // messages to send once there is room, in order
	next     []int                       // next[i] is the next message of i's key, or -1
	returned map[returnKey][]amqp.Return // returns not yet matched to an ack
	closeErr *amqp.Error
	chClosed bool
	gaveUp   error // why the call stopped waiting on its channel: blocked, a confirm timeout
	timer    *time.Timer
	clean    bool
}

// failAll records cause, classified, for every message that has a route,
// as when no channel could be had.
func (b *batch) failAll(cause error) {
	for i := range b.msgs {
		if b.invalid[i] != nil {
			b.errs[i] = b.invalid[i]
			continue
		}
		b.errs[i] = classify(b.routes[i], cause)
	}
}

// route computes every message's route, records the messages that have
// none as failed permanently, and returns the exchanges the call
// publishes to.
func (b *batch) route() []string {
	b.invalid = make([]error, len(b.msgs))
	var names []string
	seen := map[string]bool{}
	for i, m := range b.msgs {
		r, err := b.p.Route(m.Destination, m.Event)
		b.routes[i] = r
		if err != nil {
			b.invalid[i] = outbox.Permanent(routeError(r, fmt.Errorf("route: %w", err)))
			continue
		}
		if !seen[r.Exchange] {
			seen[r.Exchange] = true
			names = append(names, r.Exchange)
		}
	}
	return names
}

// run sends the ready messages through the window, collecting confirms as
// it goes, which make the next message of each key ready, until nothing
// is ready or in flight; when ctx ends or the channel closes it marks
// everything unconfirmed.
func (b *batch) run() {
	for b.ctx.Err() == nil && !b.chClosed && (len(b.ready) > 0 || len(b.pending) > 0) {
		if len(b.ready) == 0 || len(b.pending) >= b.p.cfg.MaxInFlight {
			if !b.awaitOldest() {
				break
			}
			continue
		}
		i := b.ready[0]
		b.ready = b.ready[1:]
		b.send(i)
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.clean = len(b.pending) == 0 && !b.chClosed
	b.abandon()
}

// send publishes message i, recording it in flight or its error. When
// the channel closed before i went out, i reports what the close says of
// a message like it (a 404 or 403 naming its exchange), as the messages
// in flight do, and a lost channel otherwise.
func (b *batch) send(i int) {
	if err := b.invalid[i]; err != nil {
		b.settle(i, err)
		return
	}
	r := b.routes[i]
	if cause, ok := b.missing[r.Exchange]; ok {
		b.settle(i, classify(r, cause))
		return
	}
	if b.c.s.blocked.Load() {
		b.settle(i, classify(r, ErrBlocked))
		return
	}
	pub, err := buildPublishing(i, r, b.msgs[i].Event, b.p.cfg)
	if err != nil {
		b.settle(i, outbox.Permanent(err))
		return
	}
	dc, err := b.c.ch.PublishWithDeferredConfirm(r.Exchange, r.RoutingKey, true, false, pub)
	if err != nil {
		b.awaitClose()
		b.settle(i, classify(r, b.lostCause(i, fmt.Errorf("%w: %w", ErrConnection, err))))
		return
	}
	b.pending = append(b.pending, inflight{idx: i, dc: dc, deadline: time.Now().Add(b.p.cfg.ConfirmTimeout)})
}

// awaitOldest waits for the outcome of the oldest message in flight and
// records it. It returns false, leaving the message in flight, when ctx
// ended, the confirm timed out or the connection was blocked.
func (b *batch) awaitOldest() bool {
	f := b.pending[0]
	b.resetTimer(time.Until(f.deadline))
	blocked := b.c.s.blockedSignal()
	if b.c.s.blocked.Load() { // blocked before the signal was taken
		b.failPending(ErrBlocked)
		return false
	}
	for {
		select {
		case ret, ok := <-b.c.returns:
			if ok {
				b.recordReturn(ret)
			} else {
				b.c.returns = nil // the channel closed; it is not reused
			}
			continue
		case <-f.dc.Done():
		case <-b.timer.C:
			b.failPending(ErrConfirmTimeout)
			b.p.discard(b.c.s)
			return false
		case <-blocked:
			b.failPending(ErrBlocked)
			return false
		case <-b.ctx.Done():
			return false
		}
		break
	}
	b.pending = b.pending[1:]
	b.settle(f.idx, b.outcome(f))
	return true
}

// outcome is the result of a message whose confirmation is done: a
// return that came before its ack makes it unroutable; a nack, or the
// channel's close (which ends every outstanding confirmation unacked),
// fails it.
func (b *batch) outcome(f inflight) error {
	b.drainReturns()
	m := b.msgs[f.idx]
	r := b.routes[f.idx]
	if f.dc.Acked() {
		if ret, ok := b.takeReturn(m.Event.ID.String(), r); ok {
			return classify(r, fmt.Errorf("%w (exchange %q, routing key %q, %d %s)",
				ErrUnroutable, ret.Exchange, ret.RoutingKey, ret.ReplyCode, ret.ReplyText))
		}
		return nil
	}
	if b.channelClosed() {
		return classify(r, b.causeFor(f.idx))
	}
	return classify(r, ErrNacked)
}

// drainReturns records every returned message already delivered.
func (b *batch) drainReturns() {
	for {
		select {
		case ret, ok := <-b.c.returns:
			if !ok {
				b.c.returns = nil // the channel closed; it is not reused
				return
			}
			b.recordReturn(ret)
		default:
			return
		}
	}
}

// returnKey is what a returned message is matched on: the message_id,
// exchange and routing key it was published with. The event ID alone is
// not enough: a call may carry one event to several routes.
type returnKey struct{ id, exchange, routingKey string }

func (b *batch) recordReturn(ret amqp.Return) {
	if b.returned == nil {
		b.returned = make(map[returnKey][]amqp.Return)
	}
	k := returnKey{ret.MessageId, ret.Exchange, ret.RoutingKey}
	b.returned[k] = append(b.returned[k], ret)
}

// takeReturn removes and returns the oldest return recorded for the
// message with event ID id published to r, if any. RabbitMQ sends a
// message's basic.return before its basic.ack, so the oldest unmatched
// return with its key is the one of the message being acked.
func (b *batch) takeReturn(id string, r Route) (amqp.Return, bool) {
	k := returnKey{id, r.Exchange, r.RoutingKey}
	rets := b.returned[k]
	if len(rets) == 0 {
		return amqp.Return{}, false
	}
	if len(rets) == 1 {
		delete(b.returned, k)
	} else {
		b.returned[k] = rets[1:]
	}
	return rets[0], true
}

// channelClosed reports whether the call's channel has closed, recording
// the error it closed with.
func (b *batch) channelClosed() bool {
	select {
	case e, ok := <-b.c.closes:
		b.chClosed = true
		if ok && e != nil {
			b.closeErr = e
			b.forgetMissing(e)
		}
	default:
	}
	if !b.chClosed && b.c.ch.IsClosed() {
		b.chClosed = true
	}
	return b.chClosed
}

// forgetMissing drops the exchange a 404 close names from those known to
// exist, so that the next call checks it again.
func (b *batch) forgetMissing(e *amqp.Error) {
	if e.Code != amqp.NotFound {
		return
	}
	for _, r := range b.routes {
		if namesExchange(e.Reason, r.Exchange) {
			b.c.s.forget(r.Exchange)
		}
	}
}

// causeFor is the cause message i reports after its channel closed: the
// close's own cause for the message it names (the over-size one, one
// for the missing exchange, one for the refused exchange or, with topic
// permissions, routing key), a lost channel for the others, which may be
// stored or not.
func (b *batch) causeFor(i int) error {
	cause := closeCause(b.closeErr)
	e := b.closeErr
	switch {
	case errors.Is(cause, ErrMessageTooLarge):
		if !namesSize(e.Reason, len(b.msgs[i].Event.Payload)) {
			return fmt.Errorf("%w: the channel closed: %w", ErrConnection, e)
		}
	case errors.Is(cause, ErrMissingExchange):
		if !namesExchange(e.Reason, b.routes[i].Exchange) {
			return fmt.Errorf("%w: the channel closed: %w", ErrConnection, e)
		}
	case errors.Is(cause, ErrAccessRefused):
		if !namesRoute(e.Reason, b.routes[i]) {
			return fmt.Errorf("%w: the channel closed: %w", ErrConnection, e)
		}
	}
	return cause
}

// awaitClose waits, after a publish failed, for the close of the call's
// channel and records the error it closed with: the broker's reason (a
// 403 or 404 on a message already sent) is what the messages in flight
// report. The client sends it before it ends their confirmations, so
// every message not confirmed by then never will be. The wait ends with
// ctx or after Config.ConfirmTimeout.
func (b *batch) awaitClose() {
	b.chClosed = true
	b.resetTimer(b.p.cfg.ConfirmTimeout)
	select {
	case e, ok := <-b.c.closes:
		if ok && e != nil {
			b.closeErr = e
			b.forgetMissing(e)
		}
	case <-b.timer.C:
	case <-b.ctx.Done():
	}
}

// failPending records cause for every message in flight whose
// confirmation has not come, and the outcome of those whose has; the
// channel is not reused.
func (b *batch) failPending(cause error) {
	for _, f := range b.pending {
		select {
		case <-f.dc.Done():
			b.settle(f.idx, b.outcome(f))
		default:
			b.settle(f.idx, classify(b.routes[f.idx], cause))
		}
	}
	b.pending = nil
	b.chClosed = true
	b.gaveUp = cause
}

func (b *batch) resetTimer(d time.Duration) {
	if b.timer == nil {
		b.timer = time.NewTimer(d)
		return
	}
	b.timer.Reset(d)
}

// abandon records the end of ctx, the channel's loss, or what made the
// call give up on its channel (a block, a confirm timeout), for every
// ready message, never sent, and for every message still in flight whose
// confirm has not already arrived; the later messages of their keys are
// not attempted.
func (b *batch) abandon() {
	if len(b.pending) == 0 && len(b.ready) == 0 {
		return
	}
	cause := b.abandonCause()
	for _, f := range b.pending {
		select {
		case <-f.dc.Done():
			b.errs[f.idx] = b.outcome(f)
		default:
			b.errs[f.idx] = classify(b.routes[f.idx], b.lostCause(f.idx, cause))
		}
		b.stop(f.idx)
	}
	for _, i := range b.ready {
		b.errs[i] = classify(b.routes[i], b.lostCause(i, cause))
		b.stop(i)
	}
}

// lostCause is the cause message i reports when the call stops with it
// unconfirmed or unsent: what the close says of it (causeFor) when the
// broker closed the channel, so that a message like the one the broker
// refused reports the same whether or not it went out before the close;
// cause otherwise.
func (b *batch) lostCause(i int, cause error) error {
	if b.closeErr != nil {
		return b.causeFor(i)
	}
	return cause
}

// abandonCause is why the messages left in flight or unsent failed.
func (b *batch) abandonCause() error {
	switch {
	case b.gaveUp != nil:
		return b.gaveUp
	case b.ctx.Err() != nil:
		return contextCause(b.ctx)
	}
	return fmt.Errorf("%w: the channel closed", ErrConnection)
}

// contextCause is the cause of messages not confirmed when ctx ended: a
// deadline, which classify marks unavailable (the whole call ran out of
// time), or a cancellation, retryable but no outage.
func contextCause(ctx context.Context) error {
	err := ctx.Err()
	cause := fmt.Errorf("amqppub: not confirmed before the context ended: %w", err)
	if errors.Is(err, context.DeadlineExceeded) {
		return cause
	}
	return &cancelled{cause}
}

// cancelled is a cancellation of the caller's context: retryable, but no
// outage, since it says nothing of the broker.
type cancelled struct{ err error }

func (c *cancelled) Error() string { return c.err.Error() }
func (c *cancelled) Unwrap() error { return c.err }
