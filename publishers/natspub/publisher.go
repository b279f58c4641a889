package natspub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Publisher publishes outbox messages to NATS JetStream. It implements
// [outbox.Publisher] and is safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg Config
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher that publishes through js, which the caller
// builds (connection, TLS, credentials, domain, async-publish limits all
// pass through) and keeps open while the Publisher is used. cfg's zero
// fields take their defaults; an out-of-range field returns an
// *outbox.ConfigError naming it, a nil js an *outbox.InputError.
func New(js jetstream.JetStream, cfg Config) (*Publisher, error) {
	if js == nil {
		return nil, &outbox.InputError{Field: "js", Reason: "must not be nil"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{js: js, cfg: cfg}, nil
}

// Subject returns the NATS subject a message for dest is published on:
// Config.SubjectPrefix followed by dest.
func (p *Publisher) Subject(dest string) string { return p.cfg.SubjectPrefix + dest }

// Publish sends msgs with the asynchronous JetStream API, keeping up to
// Config.MaxPending of them in flight, and waits for their PubAcks. It
// returns one error per message, in the order of msgs: nil when the stream
// stored the message, or reported it a duplicate of an event ID it already
// holds within its duplicate window. Failures that retrying cannot fix are
// wrapped with [outbox.Permanent]; see the package documentation for the
// classification.
//
// When ctx ends, Publish stops sending and returns at once; every message
// not yet confirmed reports ctx.Err(), wrapped, which is retryable (and
// outbox.Unavailable when ctx's deadline passed). A message whose PubAck
// does not come within Config.AckTimeout reports [ErrAckTimeout], wrapped
// with outbox.Unavailable, as are no responders and a closed or
// disconnected connection (see the package documentation). Within one call, the messages the stream stores are
// stored in the order of msgs.
//
// With Config.KeyOrder, the messages of one outbox.OrderKey are sent one
// at a time, each after the PubAck of the one before; after a key's first
// failure (ctx ending included) the rest of the key reports an error
// wrapping outbox.ErrNotAttempted and is not sent.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	b := &batch{p: p, ctx: ctx, msgs: msgs, errs: make([]error, len(msgs)), maxPayload: maxPayload(p.js)}
	b.next, b.ready = runs(msgs, p.cfg.KeyOrder)
	b.run()
	return b.errs
}

// inflight is one message sent and not yet confirmed.
type inflight struct {
	idx      int
	subject  string
	paf      jetstream.PubAckFuture
	deadline time.Time
}

// batch is the state of one Publish call.
type batch struct {
	p       *Publisher
	ctx     context.Context
	msgs    []outbox.Message
	errs    []error
	pending []inflight // in send order
	ready   []int      // messages to send once there is room, in order
	next    []int      // next[i] is the next message of i's key, or -1
	timer   *time.Timer
	// maxPayload is the server's limit on headers plus data, read once
	// per call; 0 when unknown.
	maxPayload int64
}

// maxPayload returns the max_payload the server of js announced, or 0
// when js has no connection or the connection has not been established.
func maxPayload(js jetstream.JetStream) int64 {
	if nc := js.Conn(); nc != nil {
		return nc.MaxPayload()
	}
	return 0
}

// run sends the ready messages through the window, collecting acks as it
// goes, which make the next message of each key ready, until nothing is
// ready or in flight; when ctx ends it marks everything unconfirmed.
func (b *batch) run() {
	for b.ctx.Err() == nil && (len(b.ready) > 0 || len(b.pending) > 0) {
		if len(b.ready) == 0 || len(b.pending) >= b.p.cfg.MaxPending {
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
	b.abandon()
}

// send publishes message i, recording it in flight or its error.
func (b *batch) send(i int) {
	m := b.msgs[i]
	subject := b.p.Subject(m.Destination)
	id := m.Event.ID.String()
	msg, err := buildMsg(i, subject, id, b.p.cfg.Source, m.Event, b.maxPayload)
	if err != nil {
		b.settle(i, outbox.Permanent(err))
		return
	}
	paf, err := b.publishAsync(msg)
	if err != nil {
		b.settle(i, publishError(subject, err))
		return
	}
	b.pending = append(b.pending, inflight{idx: i, subject: subject, paf: paf, deadline: time.Now().Add(b.p.cfg.AckTimeout)})
}

// publishAsync hands msg to the jetstream client. When the client's own
// in-flight cap is reached (other callers share it), it waits for one of
// this batch's acks, or retries for up to AckTimeout, instead of failing.
func (b *batch) publishAsync(msg *nats.Msg) (jetstream.PubAckFuture, error) {
	giveUp := time.Now().Add(b.p.cfg.AckTimeout)
	for {
		// No client-side retry on "no responders": a retried message could
		// be stored after later ones, breaking the batch order.
		paf, err := b.p.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0))
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return paf, err
		}
		if len(b.pending) > 0 {
			if !b.awaitOldest() {
				return nil, b.ctx.Err()
			}
			continue
		}
		if b.ctx.Err() != nil || time.Now().After(giveUp) {
			return nil, cmpErr(b.ctx.Err(), err)
		}
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// buildMsg returns the NATS message for e, message i of its call (whose
// ID in text is id), from source on subject, with every header it will
// travel with (Nats-Msg-Id included); or a permanent cause: a malformed
// subject, a zero event ID (it is the dedupe key), a field NATS would not
// carry unchanged, a message larger than maxPayload (0: unknown).
func buildMsg(i int, subject, id, source string, e outbox.Event, maxPayload int64) (*nats.Msg, error) {
	if reason := checkSubject(subject); reason != "" {
		return nil, fmt.Errorf("natspub: subject %q %s", subject, reason)
	}
	if e.ID == uuid.Nil {
		return nil, errors.New("natspub: event has no ID (the stream deduplicates on it)")
	}
	if err := carriable(i, e); err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Header: encodeHeaders(e, id, source), Data: e.Payload}
	if err := checkSize(i, msg, maxPayload); err != nil {
		return nil, err
	}
	return msg, nil
}

// awaitOldest waits for the outcome of the oldest message in flight and
// records it. It returns false, leaving the message in flight, when ctx
// ended first.
func (b *batch) awaitOldest() bool {
	f := b.pending[0]
	b.resetTimer(time.Until(f.deadline))
	var err error
	select {
	case <-f.paf.Ok():
		// A PubAck, Duplicate or not: the stream holds the event.
	case cause := <-f.paf.Err():
		err = publishError(f.subject, cause)
	case <-b.timer.C:
		err = publishError(f.subject, b.timeoutCause(f.subject))
	case <-b.ctx.Done():
		return false
	}
	b.pending = b.pending[1:]
	b.settle(f.idx, err)
	return true
}

// timeoutCause tells a publish the server refused (permanent) from an ack
// that is merely late (retryable).
func (b *batch) timeoutCause(subject string) error {
	if deniedPublish(b.p.js.Conn(), subject) {
		return nats.ErrPermissionViolation
	}
	return ErrAckTimeout
}

func (b *batch) resetTimer(d time.Duration) {
	if b.timer == nil {
		b.timer = time.NewTimer(d)
		return
	}
	b.timer.Reset(d)
}

// abandon records the end of ctx for every ready message, never sent, and
// for every message still in flight whose ack has not already arrived;
// the later messages of their keys are not attempted.
func (b *batch) abandon() {
	if len(b.pending) == 0 && len(b.ready) == 0 {
		return
	}
	cause := fmt.Errorf("natspub: not confirmed before the context ended: %w", cmpErr(b.ctx.Err(), context.Canceled))
	if errors.Is(b.ctx.Err(), context.DeadlineExceeded) {
		cause = outbox.Unavailable(cause) // the whole call ran out of time; a cancellation says nothing of the server
	}
	for _, f := range b.pending {
		select {
		case <-f.paf.Ok():
		default:
			b.errs[f.idx] = cause
		}
		b.stop(f.idx)
	}
	for _, i := range b.ready {
		b.errs[i] = cause
		b.stop(i)
	}
}
