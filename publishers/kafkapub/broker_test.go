package kafkapub_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// testPartitions is the partition count of every test topic: more than one,
// so key order depends on the key choosing the partition.
const testPartitions = 3

// broker is a Kafka cluster that tests create topics on.
type broker struct {
	seeds       []string
	createTopic func(t testing.TB, topic string)
	fake        *kfake.Cluster // nil for a real cluster
}

// newFakeBroker starts an in-process kfake cluster with automatic topic
// creation off, closed when t ends.
func newFakeBroker(t testing.TB, opts ...kfake.Opt) *broker {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &broker{
		seeds: c.ListenAddrs(),
		fake:  c,
		createTopic: func(t testing.TB, topic string) {
			t.Helper()
			require.NoError(t, c.CreateTopic(topic, testPartitions, nil))
		},
	}
}

// newRealBroker connects to the cluster in KAFKA_BROKERS (comma-separated
// seeds), or skips the test when the variable is unset. Topics it creates
// are deleted when the test ends.
func newRealBroker(t *testing.T) *broker {
	t.Helper()
	env := os.Getenv("KAFKA_BROKERS")
	if env == "" {
		t.Skip("KAFKA_BROKERS is not set: skipping the real-cluster variant (the kfake variant always runs)")
	}
	seeds := strings.Split(env, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	return &broker{seeds: seeds, createTopic: func(t testing.TB, topic string) {
		t.Helper()
		createRealTopic(t, adm, topic)
	}}
}

// createRealTopic creates topic, waits until the cluster reports its
// partitions, and deletes it when t ends.
func createRealTopic(t testing.TB, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, testPartitions, -1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	require.Eventually(t, func() bool {
		details, err := adm.ListTopics(ctx, topic)
		return err == nil && details.Has(topic) && details[topic].Err == nil &&
			len(details[topic].Partitions) == testPartitions
	}, 30*time.Second, 50*time.Millisecond)
}

// uniqueName returns a topic-safe name unique to this test run.
func uniqueName(prefix string) string {
	return prefix + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
}

// newTopic creates a fresh topic and returns its name.
func (b *broker) newTopic(t testing.TB) string {
	t.Helper()
	topic := uniqueName("kafkapub")
	b.createTopic(t, topic)
	return topic
}

// publisher returns a Publisher from NewFromOpts on b, closed when t ends.
func (b *broker) publisher(t testing.TB, cfg kafkapub.Config, opts ...kgo.Opt) *kafkapub.Publisher {
	t.Helper()
	p, err := kafkapub.NewFromOpts(cfg, append([]kgo.Opt{kgo.SeedBrokers(b.seeds...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// consume reads topic from the start until n records arrived or ctx ends.
func (b *broker) consume(ctx context.Context, t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < n && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

// harness connects the conformance suite to b, with topics under prefix.
func (b *broker) harness(prefix string) outboxtest.Harness {
	return outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			return b.publisher(t, kafkapub.Config{TopicPrefix: prefix})
		},
		NewDestination: func(t *testing.T) string {
			dest := uniqueName("dest")
			b.createTopic(t, prefix+dest)
			return dest
		},
		MissingDestination: func(*testing.T) string { return uniqueName("missing") },
		Receive: func(ctx context.Context, t *testing.T, dest string, n int) []outboxtest.Received {
			return decodeAll(t, prefix, b.consume(ctx, t, prefix+dest, n))
		},
	}
}

// decodeAll decodes records into what the conformance suite expects.
func decodeAll(t testing.TB, prefix string, recs []*kgo.Record) []outboxtest.Received {
	t.Helper()
	got := make([]outboxtest.Received, 0, len(recs))
	for _, r := range recs {
		e, err := kafkapub.Decode(r)
		require.NoError(t, err)
		got = append(got, outboxtest.Received{
			Destination: strings.TrimPrefix(r.Topic, prefix),
			Key:         string(r.Key),
			Event:       e,
			Attributes:  attributes(r),
		})
	}
	return got
}

// features is what Kafka offers: key order, but no deduplication across
// producer sessions.
var features = outboxtest.Features{ServerDedupe: false, KeyOrder: true, CloudEvents: true}

func TestConformanceKfake(t *testing.T) {
	t.Parallel()
	outboxtest.RunPublisherSuite(t, newFakeBroker(t).harness("pgoutbox.test."), features)
}

func TestConformanceKafka(t *testing.T) {
	t.Parallel()
	outboxtest.RunPublisherSuite(t, newRealBroker(t).harness("pgoutbox.test."), features)
}

// attributes reads the CloudEvents attributes of r as the Kafka binding
// defines them, independently of Decode: ce_ headers, and content-type
// for datacontenttype.
func attributes(r *kgo.Record) map[string]string {
	attrs := map[string]string{}
	for _, h := range r.Headers {
		switch {
		case h.Key == "content-type":
			attrs["datacontenttype"] = string(h.Value)
		case strings.HasPrefix(h.Key, "ce_"):
			attrs[strings.TrimPrefix(h.Key, "ce_")] = string(h.Value)
		}
	}
	return attrs
}
