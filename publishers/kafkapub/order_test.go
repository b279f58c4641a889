package kafkapub_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// keyEvents returns n events of one order key.
func keyEvents(key string, n int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outboxtest.NewEvent(i)
		events[i].PartitionKey = key
	}
	return events
}

// firstAppearances returns the event IDs of recs in the order of their
// first appearance, and the partitions they were in.
func firstAppearances(t *testing.T, recs []*kgo.Record) (ids []string, partitions map[int32]bool) {
	t.Helper()
	seen, partitions := map[string]bool{}, map[int32]bool{}
	for _, r := range recs {
		e, err := kafkapub.Decode(r)
		require.NoError(t, err)
		partitions[r.Partition] = true
		if id := e.ID.String(); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, partitions
}

func idsOf(events []outbox.Event) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID.String()
	}
	return ids
}

// requireInOrder checks that topic holds exactly the events of want (each
// at least once), in one partition, with no inversion of first appearances.
func requireInOrder(t *testing.T, b *broker, topic string, want []outbox.Event, records int) {
	t.Helper()
	recs := b.consume(timeout(t), t, topic, records)
	ids, partitions := firstAppearances(t, recs)
	require.Equal(t, idsOf(want), ids)
	require.Len(t, partitions, 1)
}

// stored returns how many records topic holds, from its end offsets.
func (b *broker) stored(t *testing.T, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...))
	require.NoError(t, err)
	defer cl.Close()
	offsets, err := kadm.NewClient(cl).ListEndOffsets(timeout(t), topic)
	require.NoError(t, err)
	require.NoError(t, offsets.Error())
	var n int64
	offsets.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// producesSequence matches a produce request that carries a record batch
// whose first sequence number is seq: with one key on a fresh producer,
// the batch of the key's record seq.
func producesSequence(seq int32) func(kmsg.Request) bool {
	return func(req kmsg.Request) bool {
		for _, topic := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range topic.Partitions {
				var rb kmsg.RecordBatch
				if rb.ReadFrom(p.Records) == nil && rb.FirstSequence == seq {
					return true
				}
			}
		}
		return false
	}
}

func TestPublishKeyOrder(t *testing.T) {
	t.Parallel()

	const n, bad = 100, 50

	t.Run("RunArrivesInOrderInOnePartition", func(t *testing.T) {
		t.Parallel()
		b := newFakeBroker(t)
		topic := b.newTopic(t)
		p := b.publisher(t, kafkapub.Config{KeyOrder: true})
		events := keyEvents("hot", n)
		for i, err := range p.Publish(timeout(t), toTopic(topic, events...)) {
			require.NoError(t, err, "message %d", i)
		}
		requireInOrder(t, b, topic, events, n)
	})

	// A produce of record bad fails once with err. Its message reports the
	// error (fails), unless franz-go retries it (retried) or Publish
	// produces it again alone (alone); every later message of a call that
	// did not complete reports ErrNotAttempted, and nothing after the
	// failed one is stored; Publish of the remainder completes the run in
	// order.
	for _, tc := range []struct {
		err     *kerr.Error
		outcome string
	}{
		{kerr.PolicyViolation, "fails"},            // not retryable
		{kerr.CorruptMessage, "fails"},             // retryable, but not for franz-go
		{kerr.InvalidRecord, "alone"},              // a rejected batch
		{kerr.NotEnoughReplicas, "retried"},        // retryable
		{kerr.RequestTimedOut, "retried"},          // retryable, outcome unknown
		{kerr.OutOfOrderSequenceNumber, "retried"}, // franz-go resets the producer
	} {
		t.Run("FailureInTheMiddle/"+tc.err.Message, func(t *testing.T) {
			t.Parallel()
			b := newFakeBroker(t)
			topic := b.newTopic(t)
			p := b.publisher(t, kafkapub.Config{KeyOrder: true})
			b.fake.Fault(kfake.Fault{
				Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: tc.err, When: producesSequence(bad),
			})
			events := keyEvents("hot", n)
			msgs := toTopic(topic, events...)
			errs := p.Publish(timeout(t), msgs)
			stored := map[string]int{"fails": bad, "alone": bad + 1, "retried": n}[tc.outcome]
			for i, err := range errs[:stored] {
				require.NoError(t, err, "message %d", i)
			}
			if tc.outcome == "fails" {
				require.ErrorIs(t, errs[bad], tc.err)
				require.NotErrorIs(t, errs[bad], outbox.ErrNotAttempted)
			}
			for i := bad + 1; i < len(errs) && stored < n; i++ {
				require.ErrorIs(t, errs[i], outbox.ErrNotAttempted, "message %d", i)
				require.False(t, outbox.IsPermanent(errs[i]))
				require.NotContains(t, errs[i].Error(), secret)
			}
			require.EqualValues(t, stored, b.stored(t, topic))
			requireInOrder(t, b, topic, events[:stored], stored)
			for i, err := range p.Publish(timeout(t), msgs[stored:]) {
				require.NoError(t, err, "retry, message %d", stored+i)
			}
			requireInOrder(t, b, topic, events, n)
			require.EqualValues(t, n, b.stored(t, topic), "no duplicates")
		})
	}

	// The context ends while the produce of record bad is in flight, which
	// the broker keeps failing retryably: it reports the context's end,
	// the rest of the key ErrNotAttempted.
	t.Run("ContextEndsInTheMiddle", func(t *testing.T) {
		t.Parallel()
		b := newFakeBroker(t)
		topic := b.newTopic(t)
		p := b.publisher(t, kafkapub.Config{KeyOrder: true})
		ctx, cancel := context.WithCancel(timeout(t))
		defer cancel()
		isBad := producesSequence(bad)
		b.fake.Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1,
			When: func(req kmsg.Request) bool {
				if isBad(req) {
					cancel()
					return true
				}
				return false
			},
		})
		errs := p.Publish(ctx, toTopic(topic, keyEvents("hot", n)...))
		for i, err := range errs[:bad] {
			require.NoError(t, err, "message %d", i)
		}
		require.ErrorIs(t, errs[bad], context.Canceled)
		for i := bad + 1; i < n; i++ {
			require.ErrorIs(t, errs[i], outbox.ErrNotAttempted, "message %d", i)
		}
	})

	t.Run("PublishesKeysInOrder", func(t *testing.T) {
		t.Parallel()
		b := newFakeBroker(t)
		for _, tc := range []struct {
			cfg  kafkapub.Config
			opts []kgo.Opt
			want bool
		}{
			{kafkapub.Config{}, nil, false},
			{kafkapub.Config{KeyOrder: true}, nil, true},
			{kafkapub.Config{KeyOrder: true, KeyFunc: kafkapub.KeyPartitionOrAggregate}, nil, true},
			{kafkapub.Config{KeyOrder: true, KeyFunc: kafkapub.KeyAggregate}, nil, false},
			{kafkapub.Config{KeyOrder: true}, []kgo.Opt{kgo.DisableIdempotentWrite()}, false},
		} {
			p := b.publisher(t, tc.cfg, tc.opts...)
			require.Equal(t, tc.want, p.PublishesKeysInOrder(), "%+v", tc)
		}
	})
}

// TestFranzGoFailedProduce records what franz-go does with the other
// records of a partition when a produce request fails with an error it
// does not retry, which is why a Publisher that keeps key order produces
// each key's records one at a time (see PublishesKeysInOrder).
func TestFranzGoFailedProduce(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*broker, *kgo.Client, string) {
		t.Helper()
		b := newFakeBroker(t)
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...), kgo.ProducerLinger(0))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return b, cl, b.newTopic(t)
	}
	record := func(topic string, i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte("k"), Value: fmt.Appendf(nil, "%d", i)}
	}

	// Every record franz-go holds for the partition when the failure
	// arrives fails with it, those buffered behind the failed request
	// included.
	t.Run("RecordsHeldFailTogether", func(t *testing.T) {
		t.Parallel()
		b, cl, topic := setup(t)
		held, release := make(chan struct{}), make(chan struct{})
		first := true
		b.fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			if first {
				first = false
				close(held)
				b.fake.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation})
		results := make(chan error, 10)
		promise := func(_ *kgo.Record, err error) { results <- err }
		cl.Produce(timeout(t), record(topic, 0), promise)
		<-held
		for i := 1; i < 10; i++ {
			cl.Produce(timeout(t), record(topic, i), promise)
		}
		close(release)
		for range 10 {
			require.ErrorIs(t, <-results, kerr.PolicyViolation)
		}
	})

	// A record handed to franz-go after the failure was handled is
	// written: nothing stops a later record of the key.
	t.Run("RecordAfterTheFailureIsWritten", func(t *testing.T) {
		t.Parallel()
		b, cl, topic := setup(t)
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation})
		require.ErrorIs(t, cl.ProduceSync(timeout(t), record(topic, 0)).FirstErr(), kerr.PolicyViolation)
		require.NoError(t, cl.ProduceSync(timeout(t), record(topic, 1)).FirstErr())
		recs := b.consume(timeout(t), t, topic, 1)
		require.Len(t, recs, 1)
		require.Equal(t, "1", string(recs[0].Value), "record 1 is in the partition, record 0 is not")
	})
}

// TestPublishKeysSideBySide checks that a failing key stops only itself:
// the other keys of the call, and its messages without a key, go on.
func TestPublishKeysSideBySide(t *testing.T) {
	t.Parallel()
	b := newFakeBroker(t)
	topic, failing := b.newTopic(t), b.newTopic(t)
	p := b.publisher(t, kafkapub.Config{KeyOrder: true})
	b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: failing, Err: kerr.PolicyViolation, Count: -1})
	var msgs []outbox.Message
	good, bad := keyEvents("good", 20), keyEvents("bad", 20)
	for i := range 20 {
		msgs = append(msgs, toTopic(topic, good[i])...)
		msgs = append(msgs, toTopic(failing, bad[i])...)
	}
	keyless := outboxtest.NewEvent(99)
	keyless.PartitionKey, keyless.AggregateID = "", ""
	msgs = append(msgs, toTopic(topic, keyless)...)
	errs := p.Publish(timeout(t), msgs)
	require.ErrorIs(t, errs[1], kerr.PolicyViolation)
	for i := range 20 {
		require.NoError(t, errs[2*i], "good message %d", i)
		if i > 0 {
			require.ErrorIs(t, errs[2*i+1], outbox.ErrNotAttempted, "bad message %d", i)
		}
	}
	require.NoError(t, errs[40], "keyless message")
	require.Zero(t, b.stored(t, failing), "the failing topic holds nothing")
	ids, _ := firstAppearances(t, b.consume(timeout(t), t, topic, 21))
	require.Equal(t, idsOf(good), slices.DeleteFunc(ids, func(id string) bool { return id == keyless.ID.String() }))
}
