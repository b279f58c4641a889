package kafkapub_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// maxMessageBytes is the max.message.bytes of the topics below: one
// batch of several sizedEvents exceeds it, one sizedEvent alone does not.
const maxMessageBytes = 4096

// sizedEvent returns an event with an incompressible payload of size bytes
// that starts with the secret, keyed so that all such events share one
// partition.
func sizedEvent(i, size int) outbox.Event {
	e := secretEvent(i)
	e.PartitionKey = "one-partition"
	e.Payload = []byte(secret + base64.StdEncoding.EncodeToString(randomBytes(size))[:size-len(secret)])
	return e
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// smallEvents returns n events of about 600 bytes, numbered from first.
func smallEvents(first, n int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = sizedEvent(first+i, 600)
	}
	return events
}

// requireStored checks, by event ID, that the first len(want) records of
// topic are the events in want.
func requireStored(t *testing.T, b *broker, topic string, want []outbox.Event) {
	t.Helper()
	recs := b.consume(timeout(t), t, topic, len(want))
	got := make(map[string]bool, len(recs))
	for _, r := range recs {
		e, err := kafkapub.Decode(r)
		require.NoError(t, err)
		got[e.ID.String()] = true
	}
	require.Len(t, got, len(want))
	for _, e := range want {
		require.True(t, got[e.ID.String()], "event %s was not stored", e.ID)
	}
}

func TestPublishRejectedBatch(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*broker, *kafkapub.Publisher, string) {
		t.Helper()
		b := newFakeBroker(t)
		topic := uniqueName("kafkapub")
		require.NoError(t, b.fake.CreateTopic(topic, testPartitions,
			map[string]string{"max.message.bytes": strconv.Itoa(maxMessageBytes)}))
		return b, b.publisher(t, kafkapub.Config{}), topic
	}

	t.Run("ConcurrentCallOfTheCauseFailsOnlyTheCause", func(t *testing.T) {
		t.Parallel()
		b, p, topic := setup(t)
		// Each round, a call with an oversize record at index bad and a
		// call without one produce to the same partition at once.
		const rounds, bad = 5, 20
		var (
			wg                       sync.WaitGroup
			start                    = make(chan struct{})
			guilty                   = make([][]outbox.Event, rounds)
			innocent                 = make([][]outbox.Event, rounds)
			guiltyErrs, innocentErrs = make([][]error, rounds), make([][]error, rounds)
		)
		for round := range rounds {
			guilty[round] = smallEvents(round*100, 40)
			guilty[round][bad] = sizedEvent(round*100+bad, 2*maxMessageBytes)
			innocent[round] = smallEvents(round*100+50, 40)
			wg.Go(func() {
				<-start
				guiltyErrs[round] = p.Publish(timeout(t), toTopic(topic, guilty[round]...))
			})
			wg.Go(func() {
				<-start
				innocentErrs[round] = p.Publish(timeout(t), toTopic(topic, innocent[round]...))
			})
		}
		close(start)
		wg.Wait()
		var stored []outbox.Event
		for round := range rounds {
			for i, err := range innocentErrs[round] {
				require.NoError(t, err, "round %d, innocent call, message %d", round, i)
			}
			for i, err := range guiltyErrs[round] {
				if i != bad {
					require.NoError(t, err, "round %d, guilty call, message %d", round, i)
				}
			}
			requireErrs(t, guiltyErrs[round][bad:bad+1], true)
			require.ErrorIs(t, guiltyErrs[round][bad], kerr.MessageTooLarge)
			stored = append(stored, innocent[round]...)
			stored = append(stored, guilty[round][:bad]...)
			stored = append(stored, guilty[round][bad+1:]...)
		}
		requireStored(t, b, topic, stored)
	})

	t.Run("ContextEndingBeforeTheLoneRetryIsRetryable", func(t *testing.T) {
		t.Parallel()
		b, p, topic := setup(t)
		ctx, cancel := context.WithCancelCause(timeout(t))
		defer cancel(nil)
		cause := errors.New("shutting down")
		var requests atomic.Int32
		// Every produce request is rejected; the second, the first lone
		// re-produce, also ends the Publish context.
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: -1,
			When: func(kmsg.Request) bool {
				if requests.Add(1) == 2 {
					cancel(cause)
				}
				return true
			}})
		errs := p.Publish(ctx, toTopic(topic, smallEvents(0, 3)...))
		requireErrs(t, errs, false)
		for _, err := range errs {
			require.ErrorIs(t, err, cause)
			require.ErrorIs(t, err, kerr.InvalidRecord)
		}
	})

	t.Run("InjectedBatchErrorIsRetriedAlone", func(t *testing.T) {
		t.Parallel()
		for _, cause := range []*kerr.Error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord} {
			b, p, topic := setup(t)
			b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: cause})
			events := smallEvents(0, 3)
			errs := p.Publish(timeout(t), toTopic(topic, events...))
			require.Equal(t, []error{nil, nil, nil}, errs, "%v", cause)
			requireStored(t, b, topic, events)
		}
	})

	t.Run("ManyRecordsThatFitAloneAreAllStored", func(t *testing.T) {
		t.Parallel()
		b, p, topic := setup(t)
		events := smallEvents(0, 40)
		errs := p.Publish(timeout(t), toTopic(topic, events...))
		for i, err := range errs {
			require.NoError(t, err, "message %d", i)
		}
		requireStored(t, b, topic, events)
	})

	t.Run("OneOversizeRecordIsTheOnlyPermanentError", func(t *testing.T) {
		t.Parallel()
		b, p, topic := setup(t)
		events := smallEvents(0, 40)
		events[17] = sizedEvent(17, 8<<10)
		errs := p.Publish(timeout(t), toTopic(topic, events...))
		for i, err := range errs {
			if i == 17 {
				requireErrs(t, errs[i:i+1], true)
				require.ErrorIs(t, err, kerr.MessageTooLarge)
				continue
			}
			require.NoError(t, err, "message %d", i)
		}
		requireStored(t, b, topic, append(events[:17:17], events[18:]...))
	})

	t.Run("PersistentBatchErrorIsPermanent", func(t *testing.T) {
		t.Parallel()
		b, p, topic := setup(t)
		b.fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: -1})
		errs := p.Publish(timeout(t), toTopic(topic, smallEvents(0, 3)...))
		requireErrs(t, errs, true)
		require.ErrorIs(t, errs[0], kerr.InvalidRecord)
	})

	t.Run("RecordTooLargeForTheClientIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := newFakeBroker(t)
		topic := b.newTopic(t)
		p := b.publisher(t, kafkapub.Config{}, kgo.ProducerBatchMaxBytes(4096))
		events := smallEvents(0, 10)
		events[3] = sizedEvent(3, 8<<10)
		errs := p.Publish(timeout(t), toTopic(topic, events...))
		requireErrs(t, errs[3:4], true)
		require.ErrorIs(t, errs[3], kerr.MessageTooLarge)
		for i, err := range errs {
			if i != 3 {
				require.NoError(t, err, "message %d", i)
			}
		}
	})
}
