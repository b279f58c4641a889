package kafkapub

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Publisher produces outbox events to Kafka through a franz-go client. It
// implements outbox.Publisher and is safe for concurrent use.
type Publisher struct {
	client    *kgo.Client
	cfg       Config
	owned     bool
	closeOnce sync.Once
	gates     gates // per topic: produce rounds share it, lone re-produces hold it alone
	// keysInOrder makes Publish produce each key's messages one at a
	// time; see PublishesKeysInOrder.
	keysInOrder bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher that produces through client, which the caller
// built, owns and closes after the Publisher is no longer used. The client
// is used exactly as configured: franz-go's defaults already require acks
// from all in-sync replicas and produce idempotently, and a caller that
// weakens them (kgo.RequiredAcks, kgo.DisableIdempotentWrite) gets what it
// asked for. cfg.UnknownTopicRetries and UnlimitedUnknownTopicRetries do
// not apply; set
// kgo.UnknownTopicRetries on the client instead.
//
// New returns an *outbox.ConfigError naming the field when cfg is out of
// range, and an *outbox.InputError naming "client" when client is nil or
// transactional
// (records produced outside a transaction would all fail).
func New(client *kgo.Client, cfg Config) (*Publisher, error) {
	if err := cfg.withDefaults().validate(); err != nil {
		return nil, err
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	return newPublisher(client, cfg, false), nil
}

// newPublisher returns the Publisher of client and cfg, valid and before
// its defaults are applied.
func newPublisher(client *kgo.Client, cfg Config, owned bool) *Publisher {
	return &Publisher{client: client, cfg: cfg.withDefaults(), owned: owned, keysInOrder: keysInOrder(client, cfg)}
}

// NewFromOpts builds a franz-go client from opts, which pass straight
// through (seed brokers, TLS, SASL, batching, compression, …), and returns a
// Publisher that owns it; [Publisher.Close] closes it.
//
// Before the caller's options, so that any of them overrides, it applies:
//   - kgo.RequiredAcks(kgo.AllISRAcks()), franz-go's default, stated so it
//     holds;
//   - kgo.UnknownTopicRetries from cfg.UnknownTopicRetries and
//     kgo.MetadataMinAge(time.Second) (franz-go: 5s), so a missing topic
//     fails within about a second and a retryable broker error is retried
//     within about a second, instead of up to 5s per metadata lookup;
//   - kgo.ProducerLinger(0) (franz-go: 10ms), since Publish waits for the
//     whole batch anyway and lingering would only add latency.
//
// The idempotent producer stays on unless the caller passes
// kgo.DisableIdempotentWrite. Automatic topic creation stays off unless
// the caller passes kgo.AllowAutoTopicCreation.
//
// Errors are those of [New], or franz-go's for invalid options.
func NewFromOpts(cfg Config, opts ...kgo.Opt) (*Publisher, error) {
	if err := cfg.withDefaults().validate(); err != nil {
		return nil, err
	}
	defaults := []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.UnknownTopicRetries(cfg.withDefaults().unknownTopicRetries()),
		kgo.MetadataMinAge(time.Second),
		kgo.ProducerLinger(0),
	}
	client, err := kgo.NewClient(append(defaults, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkapub: new client: %w", err)
	}
	if err := checkClient(client); err != nil {
		client.Close()
		return nil, err
	}
	return newPublisher(client, cfg, true), nil
}

// checkClient rejects a client the Publisher cannot produce through.
func checkClient(client *kgo.Client) error {
	if client == nil {
		return &outbox.InputError{Field: "client", Reason: "must not be nil"}
	}
	if txnID, _ := client.OptValue(kgo.TransactionalID).(string); txnID != "" {
		return &outbox.InputError{Field: "client", Reason: "must not be transactional (kgo.TransactionalID)"}
	}
	return nil
}

// Client returns the franz-go client the Publisher produces through, for
// metrics or admin calls. It must not be closed while the Publisher is used.
func (p *Publisher) Client() *kgo.Client { return p.client }

// Close closes the client [NewFromOpts] built, failing records still
// buffered with a retryable error. It does nothing for a Publisher from
// [New], whose client belongs to the caller. Close is idempotent; Publish
// after Close reports every message with a retryable error.
func (p *Publisher) Close() {
	if p.owned {
		p.closeOnce.Do(p.client.Close)
	}
}

// Publish produces every message of msgs, pipelined, to the topic
// Config.TopicPrefix + Destination, and waits for the broker's
// acknowledgement of each. It returns one error per message, in order: nil
// when acknowledged, an error wrapped with outbox.Permanent when the topic
// does not exist or is invalid, an event header name is reserved for the
// CloudEvents attributes ([HeaderPrefix]), the record is too large or invalid, or access is
// denied, and a retryable error otherwise.
//
// A broker rejects a whole record batch when the batch, or one record in
// it, is too large or invalid, and franz-go then fails every record
// buffered for that partition, records of concurrent Publish calls
// included. So a record failed with kerr.MessageTooLarge,
// kerr.RecordListTooLarge or kerr.InvalidRecord is not reported at once:
// once the rest of its call is settled, Publish produces it again alone.
// It takes the records topic by topic, one at a time in message order,
// after the Publisher's calls already producing to that topic have
// finished and while its new calls to that topic wait, so that each record
// gets a batch of its own. A record rejected alone is tried once more
// alone, and only if it is rejected again does it get the permanent error;
// any other outcome is reported as usual. So a record costs at most two
// extra round trips, and only the record that is itself too large or
// invalid ends permanent. Records that other code produces through the
// same client meanwhile can still share its batch. A call to the topic that
// the cluster holds up (a partition without a leader, say) delays the lone
// re-produces, and the calls waiting behind them, until its context or
// theirs ends.
//
// With Config.KeyOrder (see [Publisher.PublishesKeysInOrder]), the
// messages of one outbox.OrderKey are produced one at a time, each once
// the one before it was acknowledged, and after a key's first failure
// (ctx ending included) the rest of the key reports an error wrapping
// outbox.ErrNotAttempted and is not produced. A record of a rejected
// batch is then produced again alone as above: nothing after it of its
// key was produced.
//
// A context without a deadline is bounded by Config.PublishTimeout; the
// context bounds the lone re-produces and every wait too. When ctx ends
// Publish returns at once, reporting every message not yet acknowledged
// with a retryable error wrapping context.Cause(ctx); records already sent
// may still be written, so a retry can duplicate them. franz-go fails a
// partition's buffered records together, so a cancelled call can also fail
// records that a concurrent call queued behind its own on the same
// partition, with a retryable error.
//
// Error texts name the topic and the Kafka error, never payload bytes or
// header values.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	topicOf := func(i int) string { return p.topic(msgs[i]) }
	b := newBatch(len(msgs))
	topics := make([]string, len(msgs))
	for i := range msgs {
		topics[i] = topicOf(i)
	}
	slices.Sort(topics)
	unshare, err := p.gates.share(ctx, slices.Compact(topics))
	if err != nil {
		return b.abandon(ctx, topicOf)
	}
	if p.keysInOrder {
		p.produceRuns(ctx, b, msgs)
	} else {
		for i, m := range msgs {
			if ctx.Err() != nil {
				break
			}
			p.produce(ctx, b, i, m)
		}
	}
	errs := b.wait(ctx, topicOf)
	unshare()
	if len(b.rejected) > 0 {
		p.produceAlone(ctx, msgs, b.rejected, errs)
	}
	return errs
}

// topic returns the Kafka topic of m.
func (p *Publisher) topic(m outbox.Message) string { return p.cfg.TopicPrefix + m.Destination }

// withTimeout applies Config.PublishTimeout to a context with no deadline.
func (p *Publisher) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, p.cfg.PublishTimeout)
}

// produce hands message i to the client, or settles it at once when its
// topic or a header name is invalid.
func (p *Publisher) produce(ctx context.Context, b *batch, i int, m outbox.Message) {
	topic := p.topic(m)
	if err := cmp.Or(checkTopic(topic), checkHeaderNames(i, m.Event)); err != nil {
		b.settle(i, err)
		return
	}
	p.client.Produce(ctx, p.record(topic, m), func(r *kgo.Record, err error) {
		if inRejectedBatch(err) {
			b.reject(i, err)
			return
		}
		b.settle(i, classify(r.Topic, err))
	})
}

// record builds the Kafka record of m.
func (p *Publisher) record(topic string, m outbox.Message) *kgo.Record {
	return &kgo.Record{
		Topic:   topic,
		Key:     p.cfg.KeyFunc(m.Event),
		Value:   m.Event.Payload,
		Headers: encodeHeaders(m.Event, p.cfg.Source),
	}
}

// aloneAttempts bounds how often Publish produces a record of a rejected
// batch alone. The second attempt covers a record whose first lone batch
// was failed together with a bad record that a call whose context had ended
// left buffered on the same partition.
const aloneAttempts = 2

// produceAlone produces again, alone, the messages whose batch the broker
// rejected (indexes, in message order), and stores their outcomes in errs.
// It goes topic by topic, each in message order. When ctx ends first, the
// messages not yet settled get a retryable error.
func (p *Publisher) produceAlone(ctx context.Context, msgs []outbox.Message, indexes []int, errs []error) {
	pending := indexes
	for len(pending) > 0 && ctx.Err() == nil {
		topic := p.topic(msgs[pending[0]])
		var same, rest []int
		for _, i := range pending {
			if p.topic(msgs[i]) == topic {
				same = append(same, i)
			} else {
				rest = append(rest, i)
			}
		}
		n := p.produceAloneTo(ctx, topic, msgs, same, errs)
		pending = append(same[n:], rest...)
	}
	for _, i := range pending {
		errs[i] = notAlone(ctx, p.topic(msgs[i]), errs[i])
	}
}

// produceAloneTo produces the messages at indexes, all to topic, one at a
// time under the topic's exclusive hold, at most aloneAttempts times each
// while the broker rejects it, and stores their outcomes in errs. It
// returns how many it settled before ctx ended.
func (p *Publisher) produceAloneTo(
	ctx context.Context, topic string, msgs []outbox.Message, indexes []int, errs []error,
) int {
	unlock, lockErr := p.gates.lock(ctx, topic)
	if lockErr != nil {
		return 0
	}
	defer unlock()
	for n, i := range indexes {
		var err error
		for range aloneAttempts {
			if err = p.produceSync(ctx, p.record(topic, msgs[i])); !inRejectedBatch(err) {
				break
			}
		}
		if err != nil && ctx.Err() != nil {
			return n
		}
		errs[i] = classify(topic, err)
	}
	return len(indexes)
}

// produceSync produces r and returns its outcome, or ctx.Err() when ctx
// ends first.
func (p *Publisher) produceSync(ctx context.Context, r *kgo.Record) error {
	done := make(chan error, 1)
	go func() { done <- p.client.ProduceSync(ctx, r).FirstErr() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outcome is the settled result of one message.
type outcome struct {
	index    int
	err      error
	rejected bool // err is one of batchCauses, not yet classified
}

// batch collects the outcomes of one Publish call. Promises send into a
// channel large enough for every message, so they never block, even after
// Publish has returned.
type batch struct {
	done     chan outcome
	errs     []error
	seen     []bool
	left     int   // messages not yet seen
	rejected []int // messages whose batch was rejected, ascending
	runs     *runs // in a call that keeps key order: each key's run; else nil
}

func newBatch(n int) *batch {
	return &batch{done: make(chan outcome, n), errs: make([]error, n), seen: make([]bool, n), left: n}
}

// settle records the outcome of message i; safe from any goroutine.
func (b *batch) settle(i int, err error) { b.done <- outcome{index: i, err: err} }

// reject records that message i was failed with err, one of batchCauses,
// which may have been caused by another record; safe from any goroutine.
func (b *batch) reject(i int, err error) { b.done <- outcome{index: i, err: err, rejected: true} }

// wait collects outcomes until every message is settled or ctx ends; then
// every message still unsettled gets a retryable error naming topicOf(i).
func (b *batch) wait(ctx context.Context, topicOf func(i int) string) []error {
	for b.left > 0 {
		select {
		case o := <-b.done:
			b.record(o)
		case <-ctx.Done():
			return b.abandon(ctx, topicOf)
		}
	}
	return b.errs
}

func (b *batch) record(o outcome) {
	b.errs[o.index], b.seen[o.index] = o.err, true
	b.left--
	if o.rejected {
		i, _ := slices.BinarySearch(b.rejected, o.index)
		b.rejected = slices.Insert(b.rejected, i, o.index)
	}
	if b.runs != nil {
		b.runs.settled(b, o.index, o.err)
	}
}

// abandon keeps the outcomes that already arrived and marks the rest
// unconfirmed.
func (b *batch) abandon(ctx context.Context, topicOf func(i int) string) []error {
drain:
	for {
		select {
		case o := <-b.done:
			b.record(o)
		default:
			break drain
		}
	}
	for i, seen := range b.seen {
		if seen {
			continue
		}
		b.errs[i], b.seen[i] = unconfirmed(ctx, topicOf(i)), true
		if b.runs != nil {
			b.runs.stop(b, i)
		}
	}
	return b.errs
}
