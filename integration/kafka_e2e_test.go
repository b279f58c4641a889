package integration_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// TestKafkaEndToEndKillAndRecover: 10,000 events (1,000 with -short)
// emitted by 4 writers in business transactions reach a Kafka consumer
// through a dispatcher that is SIGKILLed mid-batch and a second replica
// that recovers its leases and re-produces. Every event arrives at least
// once; the events the dead dispatcher had produced but not recorded as
// SENT arrive twice, since the idempotent producer does not span producer
// sessions. Runs on an in-process kfake cluster, or KAFKA_BROKERS.
func TestKafkaEndToEndKillAndRecover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := pgtest.NewMigrated(t)
	seeds := kafkaSeeds(t)

	admClient, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(admClient.Close)
	adm := kadm.NewClient(admClient)
	prefix := "e2e-" + e2eTag() + "."
	topic := prefix + e2eEventType
	resp, err := adm.CreateTopic(ctx, 3, -1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })

	// The consumer reads the topic from its start, for the whole test.
	got := newTally()
	consumeKafka(t, seeds, topic, func(e outbox.Event) { got.add(e.ID) })

	n := e2eEvents()
	res := runKillScenario(t, db, e2eBroker{
		Kind: "kafka", Addr: strings.Join(seeds, ","), Prefix: prefix,
		Stored: func(ctx context.Context) (int, error) {
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				return 0, err
			}
			total := 0
			ends.Each(func(o kadm.ListedOffset) { total += int(o.Offset) })
			return total, ends.Error()
		},
	}, got, n)

	dups := 0
	for _, c := range res.Counts {
		dups += c - 1
	}
	require.Equal(t, n+dups, res.Total)
	require.GreaterOrEqual(t, dups, res.Republished,
		"every event the dead dispatcher produced but left PROCESSING is produced again")
	t.Logf("kafka: %d deliveries for %d events: %d duplicates (%d of them known to be in Kafka before the second replica started)",
		res.Total, n, dups, res.Republished)
}

// newKafkaPublisher returns a kafkapub Publisher on the comma-separated
// seeds in addr, for topics under prefix.
func newKafkaPublisher(addr, prefix string) (outbox.Publisher, func(), error) {
	p, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: prefix}, kgo.SeedBrokers(strings.Split(addr, ",")...))
	if err != nil {
		return nil, nil, err
	}
	return p, p.Close, nil
}

// consumeKafka reads topic from its start until the test ends, handing
// every record decoded with kafkapub.Decode to on. A record that is not an
// event fails the test.
func consumeKafka(t *testing.T, seeds []string, topic string, on func(outbox.Event)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	var consuming sync.WaitGroup
	consuming.Go(func() {
		for ctx.Err() == nil {
			for r := range cl.PollFetches(ctx).RecordsAll() {
				e, err := kafkapub.Decode(r)
				if err != nil {
					t.Errorf("not an event: %v", err)
					continue
				}
				on(e)
			}
		}
	})
	t.Cleanup(func() { cancel(); consuming.Wait(); cl.Close() })
}

// kafkaSeeds returns KAFKA_BROKERS, or the address of an in-process kfake
// cluster closed when the test ends.
func kafkaSeeds(t *testing.T) []string {
	t.Helper()
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		return strings.Split(env, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
