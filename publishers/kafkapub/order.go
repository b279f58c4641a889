package kafkapub

import (
	"context"
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
)

var _ outbox.KeyOrderedPublisher = (*Publisher)(nil)

// PublishesKeysInOrder reports whether Publish keeps the order of each
// outbox.OrderKey within a call, as outbox.KeyOrderedPublisher promises. It
// does when Config.KeyOrder is set, the record key is the order key
// (Config.KeyFunc left nil or set to [KeyPartitionOrAggregate]: another
// KeyFunc can send one key's events to several partitions) and the client
// writes idempotently (franz-go's default, off with
// kgo.DisableIdempotentWrite), so that a batch franz-go sends again is
// never written twice or out of place. The records of one key then share
// a partition, and each is produced only once the one before it was
// acknowledged. When it reports false, Publish produces every message at
// once, as without KeyOrder.
//
// The client's partitioner must send equal keys to one partition, as
// franz-go's default does; a partitioner that ignores keys (for example
// kgo.RoundRobinPartitioner) breaks the order, and this method cannot see
// it.
func (p *Publisher) PublishesKeysInOrder() bool { return p.keysInOrder }

// keysInOrder reports whether a Publisher with cfg, before its defaults
// are applied, producing through client keeps key order (see
// PublishesKeysInOrder).
func keysInOrder(client *kgo.Client, cfg Config) bool {
	disabled, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool)
	return cfg.KeyOrder && !disabled && (cfg.KeyFunc == nil || sameFunc(cfg.KeyFunc, KeyPartitionOrAggregate))
}

// sameFunc reports whether f and g are the same top-level function.
func sameFunc(f, g func(outbox.Event) []byte) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(g).Pointer()
}

// runs produces, in a call that keeps key order, the messages of each
// order key one at a time: the next only once franz-go acknowledged the
// previous. A produce request that fails makes franz-go fail the records
// it holds for the partition at that moment, but a record it is handed
// after that is written as usual (see TestFranzGoFailedProduce): so a
// later record of a key sent while an earlier one is in flight could be
// written after the earlier one failed. Keys run side by side, and
// messages without a key are all produced at once.
type runs struct {
	ctx     context.Context
	next    []int // next[i] is the next message of i's key in the call, or -1
	produce func(i int)
	topicOf func(i int) string
}

// produceRuns produces the first message of each key of msgs, and every
// message without a key, through b; b produces the rest as their
// predecessors are acknowledged.
func (p *Publisher) produceRuns(ctx context.Context, b *batch, msgs []outbox.Message) {
	r := &runs{
		ctx:     ctx,
		next:    make([]int, len(msgs)),
		produce: func(i int) { p.produce(ctx, b, i, msgs[i]) },
		topicOf: func(i int) string { return p.topic(msgs[i]) },
	}
	var heads []int
	last := make(map[string]int)
	for i, m := range msgs {
		r.next[i] = -1
		key := outbox.OrderKey(m.Event)
		if j, ok := last[key]; ok {
			r.next[j] = i
		} else {
			heads = append(heads, i)
		}
		if key != "" {
			last[key] = i
		}
	}
	b.runs = r
	for _, i := range heads {
		if ctx.Err() != nil {
			return
		}
		r.produce(i)
	}
}

// settled is told that message i got its outcome err: it produces the
// next message of i's key after a success, and stops the key otherwise or
// once ctx has ended.
func (r *runs) settled(b *batch, i int, err error) {
	j := r.next[i]
	if j < 0 {
		return
	}
	if err == nil && r.ctx.Err() == nil {
		r.produce(j)
		return
	}
	r.stop(b, i)
}

// stop settles every message of i's key after i, none of them produced,
// as not attempted.
func (r *runs) stop(b *batch, i int) {
	for j := r.next[i]; j >= 0; j = r.next[j] {
		b.errs[j], b.seen[j] = notAttempted(r.topicOf(j)), true
		b.left--
	}
}

// notAttempted is the error of a message not produced because an earlier
// message of its key in the call failed; it wraps outbox.ErrNotAttempted.
func notAttempted(topic string) error {
	return &originError{context: fmt.Sprintf("kafkapub: topic %q", topic), err: outbox.ErrNotAttempted}
}
