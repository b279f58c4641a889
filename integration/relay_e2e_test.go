package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
	"github.com/pgoutbox/pgoutbox/relay"
)

// The relay's end-to-end tests: business transactions emit into a log
// (emitter with outbox.KindLog), a relay publishes it with kafkapub or
// natspub, and a consumer of the topic or stream checks what arrived.

const (
	// relayDest is the destination every event is routed to.
	relayDest = "orders"
)

// relayRig is one test's log, in its own schema, with a business table
// whose rows the writers lock before they emit (docs/relay.md, "Per-key
// order"), the group relayGroup created at the newest tick, and an admin
// handle on the log.
type relayRig struct {
	pool *pgxpool.Pool
	log  outbox.Table
	em   *emitter.Emitter
	adm  *admin.Relay

	mu        sync.Mutex
	committed map[uuid.UUID]relayEmitted
	rolled    []uuid.UUID
}

// relayEmitted is an event a writer committed, with its key's count.
type relayEmitted struct {
	event outbox.Event
	v     int64
}

func newRelayRig(t *testing.T, ctx context.Context, keys ...string) *relayRig {
	t.Helper()
	db, log := relaytest.NewLog(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE relay_keys (key text PRIMARY KEY, v bigint NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO relay_keys (key) SELECT unnest($1::text[])`, keys)
	require.NoError(t, err)
	em, err := emitter.New(emitter.Config{Table: log, Kind: outbox.KindLog})
	require.NoError(t, err)
	adm, err := admin.NewRelay(db.Pool, admin.RelayConfig{Log: log})
	require.NoError(t, err)
	require.NoError(t, relay.CreateGroup(ctx, db.Pool, log, relayGroup, relay.Latest))
	return &relayRig{pool: db.Pool, log: log, em: em, adm: adm, committed: map[uuid.UUID]relayEmitted{}}
}

// emit runs one business transaction: it locks key's row, bumps its count
// by n and emits n events of key carrying the counts (payload and header
// x-v), each payload padded to at least size bytes; then commits, or
// rolls back when rollback is set. It records what committed.
func (r *relayRig) emit(ctx context.Context, key string, n, size int, rollback bool) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var v int64
	if err := tx.QueryRow(ctx, `UPDATE relay_keys SET v = v + $2 WHERE key = $1 RETURNING v`, key, n).Scan(&v); err != nil {
		return err
	}
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = relayTestEvent(key, v-int64(n-1-i), size)
	}
	if _, err := r.em.Emit(ctx, tx, events...); err != nil {
		return err
	}
	if rollback {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range events {
			r.rolled = append(r.rolled, e.ID)
		}
		return tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range events {
		r.committed[e.ID] = relayEmitted{event: e, v: v - int64(n-1-i)}
	}
	return nil
}

// relayTestEvent is the event of key's count v, its JSON payload padded
// to size bytes with random hex digits (which Kafka's batch compression
// cannot shrink below half).
func relayTestEvent(key string, v int64, size int) outbox.Event {
	payload := fmt.Sprintf(`{"key":%q,"v":%d}`, key, v)
	if pad := size - len(payload) - len(`,"pad":""`); pad > 0 {
		digits := make([]byte, pad)
		for i := range digits {
			digits[i] = "0123456789abcdef"[rand.IntN(16)]
		}
		payload = payload[:len(payload)-1] + `,"pad":"` + string(digits) + `"}`
	}
	return outbox.Event{
		ID: uuid.Must(uuid.NewV7()), Type: "order.updated", AggregateType: "order", AggregateID: key,
		PartitionKey: key, ContentType: "application/json", IdempotencyKey: key + "/" + strconv.FormatInt(v, 10),
		Headers: map[string]string{"x-key": key, "x-v": strconv.FormatInt(v, 10), "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Payload: []byte(payload),
	}
}

// committedIDs returns the IDs of the committed events of keys (every
// key when none is given).
func (r *relayRig) committedIDs(keys ...string) []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []uuid.UUID
	for id, e := range r.committed {
		if len(keys) == 0 || slices.Contains(keys, e.event.PartitionKey) {
			ids = append(ids, id)
		}
	}
	return ids
}

// startRelay runs a relay of the rig's group publishing through pub to
// relayDest, with cfg's settings on top, until the test ends; then stops
// it and checks that it stopped cleanly.
func (r *relayRig) startRelay(t *testing.T, ctx context.Context, pub outbox.Publisher, edit func(*relay.Config)) *relay.Relay {
	t.Helper()
	cfg := relay.Config{
		Pool: r.pool, Log: r.log, Group: relayGroup, Publisher: pub,
		RouteFunc:    func(outbox.Event) string { return relayDest },
		TickInterval: 5 * time.Millisecond, Logger: quietLogger(),
	}
	if edit != nil {
		edit(&cfg)
	}
	rl, err := relay.New(cfg)
	require.NoError(t, err)
	require.NoError(t, rl.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rl.Stop(stopCtx))
		require.NoError(t, rl.Err())
	})
	return rl
}

// relayConsumer records what a consumer of the topic or stream decoded,
// in arrival order.
type relayConsumer struct {
	mu     sync.Mutex
	events []outbox.Event
	counts map[uuid.UUID]int
}

func newRelayConsumer() *relayConsumer { return &relayConsumer{counts: map[uuid.UUID]int{}} }

func (c *relayConsumer) add(e outbox.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
	c.counts[e.ID]++
}

// missing returns how many of ids have not arrived, and one of them.
func (c *relayConsumer) missing(ids []uuid.UUID) (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, one := 0, ""
	for _, id := range ids {
		if c.counts[id] == 0 {
			n, one = n+1, id.String()
		}
	}
	return n, one
}

// awaitArrived waits until every one of ids arrived at c.
func awaitArrived(t *testing.T, ctx context.Context, c *relayConsumer, ids []uuid.UUID) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%d events at the consumer", len(ids)), func() (bool, string) {
		n, one := c.missing(ids)
		return n == 0, fmt.Sprintf("%d missing, e.g. %s", n, one)
	})
}

// requireDelivered checks what c received against the rig's committed
// events of keys (every key when none is given): every one arrived, byte
// for byte (headers and the event ID, the consumers' dedupe key,
// included), nothing rolled back arrived, and each key's events arrived
// in commit order (first deliveries; a re-delivery comes after). It
// returns the duplicates.
func requireDelivered(t *testing.T, r *relayRig, c *relayConsumer, keys ...string) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range r.rolled {
		require.Zero(t, c.counts[id], "rolled-back event %s arrived", id)
	}
	first := map[string][]int64{} // key: the counts in first-arrival order
	seen := map[uuid.UUID]bool{}
	dups := 0
	for _, got := range c.events {
		want, ok := r.committed[got.ID]
		require.True(t, ok, "event %s was not committed by this test", got.ID)
		if seen[got.ID] {
			dups++
			continue
		}
		seen[got.ID] = true
		w := want.event
		w.CreatedAt, w.Attempt = got.CreatedAt, got.Attempt // set from the log
		require.Empty(t, outboxtest.EventDiff(w, got), "event %s", got.ID)
		first[w.PartitionKey] = append(first[w.PartitionKey], want.v)
	}
	wantFirst := map[string][]int64{}
	for _, e := range r.committed {
		if len(keys) == 0 || slices.Contains(keys, e.event.PartitionKey) {
			wantFirst[e.event.PartitionKey] = append(wantFirst[e.event.PartitionKey], e.v)
		}
	}
	for k, vs := range wantFirst {
		slices.Sort(vs)
		require.Equal(t, vs, first[k], "key %s: every committed event, in commit order", k)
	}
	return dups
}

// relayBroker is a broker of one relay test: a publisher for relayDest
// under a prefix unique to the test, and a way to consume it.
type relayBroker struct {
	kind    string
	pub     outbox.Publisher
	consume func(t *testing.T, on func(outbox.Event))
	// unlimit lifts the stream's or topic's message size limit to the
	// broker's.
	unlimit func(t *testing.T, ctx context.Context)
}

// relayBrokerOpts are a relay test's broker settings: the largest
// message the stream or topic takes (0: the broker's limit), and the
// publisher's KeyOrder (outbox.KeyOrderedPublisher: the relay then sends
// a key's run in one call).
type relayBrokerOpts struct {
	maxMsg   int32
	keyOrder bool
}

// forEachRelayBroker runs f as parallel subtests on a NATS stream
// (natsServer) and a Kafka topic (kafkaSeeds), each with the publisher's
// KeyOrder off and on.
func forEachRelayBroker(t *testing.T, maxMsg int32, f func(t *testing.T, b relayBroker)) {
	t.Helper()
	for _, keyOrder := range []bool{false, true} {
		opts := relayBrokerOpts{maxMsg: maxMsg, keyOrder: keyOrder}
		suffix := ""
		if keyOrder {
			suffix = "/KeyOrder"
		}
		t.Run("NATS"+suffix, func(t *testing.T) {
			t.Parallel()
			b, _ := newRelayNATS(t, testctx.New(t), natsServer(t), opts)
			f(t, b)
		})
		t.Run("Kafka"+suffix, func(t *testing.T) {
			t.Parallel()
			f(t, newRelayKafka(t, testctx.New(t), kafkaSeeds(t), opts))
		})
	}
}

// newRelayNATS creates a stream capturing the test's subjects, with a
// long duplicate window and opts' largest message, on the server at url,
// and returns its broker.
func newRelayNATS(t *testing.T, ctx context.Context, url string, opts relayBrokerOpts) (relayBroker, jetstream.Stream) {
	t.Helper()
	tag := e2eTag()
	prefix := "relay." + tag + "."
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	require.NoError(t, err)
	name := "PGOUTBOX_RELAY_" + tag
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"},
		Duplicates: 10 * time.Minute, MaxMsgSize: opts.maxMsg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	pub, err := natspub.New(js, natspub.Config{SubjectPrefix: prefix, KeyOrder: opts.keyOrder})
	require.NoError(t, err)
	consume := func(t *testing.T, on func(outbox.Event)) {
		consumeStream(t, stream, on) // checks Nats-Msg-Id = the event ID
	}
	unlimit := func(t *testing.T, ctx context.Context) {
		cfg := stream.CachedInfo().Config
		cfg.MaxMsgSize = -1
		_, err := js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	return relayBroker{kind: "nats", pub: pub, consume: consume, unlimit: unlimit}, stream
}

// newRelayKafka creates the test's topic, with 3 partitions and opts'
// largest message (max.message.bytes), on the cluster at seeds, and
// returns its broker. kafkapub.Decode takes the event ID from the header
// kafkapub sets (kafkapub.HeaderEventID), so a decoded ID is the dedupe
// key received.
func newRelayKafka(t *testing.T, ctx context.Context, seeds []string, opts relayBrokerOpts) relayBroker {
	t.Helper()
	prefix := "relay-" + e2eTag() + "."
	topic := prefix + relayDest
	var configs map[string]*string
	if opts.maxMsg > 0 {
		limit := strconv.Itoa(int(opts.maxMsg))
		configs = map[string]*string{"max.message.bytes": &limit}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, configs, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	pub, err := kafkapub.NewFromOpts(kafkapub.Config{TopicPrefix: prefix, KeyOrder: opts.keyOrder}, kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	consume := func(t *testing.T, on func(outbox.Event)) { consumeKafka(t, seeds, topic, on) }
	unlimit := func(t *testing.T, ctx context.Context) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		require.NoError(t, err)
		defer cl.Close()
		limit := strconv.Itoa(1 << 20)
		resps, err := kadm.NewClient(cl).AlterTopicConfigs(ctx,
			[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &limit}}, topic)
		require.NoError(t, err)
		for _, r := range resps {
			require.NoError(t, r.Err)
		}
	}
	return relayBroker{kind: "kafka", pub: pub, consume: consume, unlimit: unlimit}
}

// TestRelayBrokersEndToEnd: writers emit events of 6 keys in business
// transactions (each locks its key's row first; one in 8 rolls back) while
// a relay publishes the log through kafkapub (kfake, or KAFKA_BROKERS) or
// natspub (the local JetStream, or one in process). Every committed event
// reaches the topic's or stream's consumer once, byte for byte, with its
// ID as the dedupe key; none rolled back does; each key's events arrive
// in commit order; the relay parked and retried nothing. Each broker runs
// with the publisher's KeyOrder off and on.
func TestRelayBrokersEndToEnd(t *testing.T) {
	t.Parallel()
	forEachRelayBroker(t, 0, runRelayEndToEnd)
}

func runRelayEndToEnd(t *testing.T, b relayBroker) {
	ctx := testctx.New(t)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	rig := newRelayRig(t, ctx, keys...)
	got := newRelayConsumer()
	b.consume(t, got.add)
	rl := rig.startRelay(t, ctx, b.pub, nil)

	rig.write(t, ctx, keys, 4, 60).Wait()
	ids := rig.committedIDs()
	awaitArrived(t, ctx, got, ids)
	awaitCaughtUp(t, ctx, rig)

	require.Zero(t, requireDelivered(t, rig, got), "a duplicate without a fault")
	st := rl.Stats()
	require.EqualValues(t, len(ids), st.Published)
	require.Zero(t, st.Parked)
	require.Zero(t, st.Retries)
	t.Logf("%s: %d events in %d batches", b.kind, st.Published, st.Batches)
}

// write starts writers goroutines, each running txs business
// transactions of 1 to 3 events of a random key of keys (one in 8 rolled
// back), and returns their wait group.
func (r *relayRig) write(t *testing.T, ctx context.Context, keys []string, writers, txs int) *sync.WaitGroup {
	return r.writeUntil(t, ctx, keys, writers, txs, nil)
}

// writeUntil is write, its writers stopping early once stop is closed
// (never when it is nil).
func (r *relayRig) writeUntil(t *testing.T, ctx context.Context, keys []string, writers, txs int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range txs {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rand.IntN(len(keys))]
				if err := r.emit(ctx, key, 1+rand.IntN(3), 0, rand.IntN(8) == 0); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		})
	}
	return &wg
}

// TestRelayHandOverEndToEnd: while writers emit (until the second relay
// published 50 events), the relay publishing to the broker is stopped and
// a second one takes the group over. Stop
// drains the batch in flight and records it, so every committed event
// arrives once, in per-key commit order, across the hand-over.
func TestRelayHandOverEndToEnd(t *testing.T) {
	t.Parallel()
	forEachRelayBroker(t, 0, func(t *testing.T, b relayBroker) {
		ctx := testctx.New(t)
		keys := []string{"k0", "k1", "k2", "k3"}
		rig := newRelayRig(t, ctx, keys...)
		got := newRelayConsumer()
		b.consume(t, got.add)
		first := rig.startRelay(t, ctx, b.pub, nil)

		stop := make(chan struct{})
		writing := rig.writeUntil(t, ctx, keys, 2, 100_000, stop)
		halt := sync.OnceFunc(func() { close(stop); writing.Wait() })
		t.Cleanup(halt) // on failure too
		waitFor(t, ctx, "a first relay's batches", func() (bool, string) {
			st := first.Stats()
			return st.Published >= 50, fmt.Sprintf("%+v", st)
		})
		require.NoError(t, first.Stop(ctx))
		require.NoError(t, first.Err())
		second := rig.startRelay(t, ctx, b.pub, nil)
		waitFor(t, ctx, "the second relay's batches", func() (bool, string) {
			st := second.Stats()
			return st.Published >= 50, fmt.Sprintf("%+v", st)
		})
		halt()
		awaitArrived(t, ctx, got, rig.committedIDs())
		awaitCaughtUp(t, ctx, rig)

		require.Zero(t, requireDelivered(t, rig, got), "a duplicate across a clean hand-over")
		// The cursor moves before the relay counts the piece published:
		// wait for the count (CI at load 20 read it 8 short).
		want := uint64(len(rig.committedIDs()))
		waitFor(t, ctx, "every event counted published", func() (bool, string) {
			published := first.Stats().Published + second.Stats().Published
			return published == want, fmt.Sprintf("%d of %d", published, want)
		})
		t.Logf("%s: %d events by the first relay, %d by the second", b.kind, first.Stats().Published, second.Stats().Published)
	})
}

// awaitCaughtUp waits until the group's cursor is at the newest tick,
// with no batch open.
func awaitCaughtUp(t *testing.T, ctx context.Context, rig *relayRig) {
	t.Helper()
	waitFor(t, ctx, "the group caught up", func() (bool, string) {
		g, err := rig.adm.Group(ctx, relayGroup)
		if err != nil {
			return false, err.Error()
		}
		return g.LagEvents == 0 && g.BatchTick == 0, fmt.Sprintf("%+v", g)
	})
}

// countingPublisher passes calls to a publisher and counts those whose
// every message failed with outbox.ErrUnavailable. It keeps the inner
// publisher's per-key order promise.
type countingPublisher struct {
	inner   outbox.Publisher
	outages atomic.Int64
	calls   atomic.Int64
}

func (p *countingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := p.inner.Publish(ctx, msgs)
	p.calls.Add(1)
	if len(errs) > 0 && !slices.ContainsFunc(errs, func(err error) bool { return !errors.Is(err, outbox.ErrUnavailable) }) {
		p.outages.Add(1)
	}
	return errs
}

func (p *countingPublisher) PublishesKeysInOrder() bool {
	k, ok := p.inner.(outbox.KeyOrderedPublisher)
	return ok && k.PublishesKeysInOrder()
}

// relayOutageConfig is a short publish timeout and circuit backoff, so
// that an outage is found and probed quickly.
func relayOutageConfig(c *relay.Config) {
	c.PublishTimeout = 500 * time.Millisecond
	c.CircuitMinBackoff, c.CircuitMaxBackoff = 50*time.Millisecond, 200*time.Millisecond
}

// awaitRelayOutage emits events of three keys into rig's log and waits
// until the relay's circuit is open and pub saw three calls that found
// the broker unavailable (the first and two probes); then checks that
// the relay spent no retry, parked nothing and did not move its cursor.
func awaitRelayOutage(t *testing.T, ctx context.Context, rig *relayRig, rl *relay.Relay, pub *countingPublisher) {
	t.Helper()
	waitFor(t, ctx, "the circuit open and probed twice", func() (bool, string) {
		h := rl.Health()
		return h.Circuit != relay.CircuitClosed && pub.outages.Load() >= 3,
			fmt.Sprintf("circuit %s, %d outage calls of %d, %+v", h.Circuit, pub.outages.Load(), pub.calls.Load(), rl.Stats())
	})
	h := rl.Health()
	require.NotEmpty(t, h.Degraded, "an open circuit degrades the relay")
	require.NoError(t, h.Healthy(time.Minute), "an open circuit is not unhealthy")
	st := rl.Stats()
	require.Zero(t, st.Retries, "the outage spent retries")
	require.Zero(t, st.Parked, "the outage parked events")
	require.Zero(t, st.Published)
	keys, err := rig.adm.ParkedKeys(ctx, relayGroup, admin.ParkedKeysQuery{})
	require.NoError(t, err)
	require.Empty(t, keys)
	g, err := rig.adm.Group(ctx, relayGroup)
	require.NoError(t, err)
	require.Positive(t, g.LagEvents, "the cursor moved during the outage: %+v", g)
}

// requireRecovered checks, once every event arrived, that the circuit
// closed, that nothing was retried or parked, and that every event was
// recorded published once.
func requireRecovered(t *testing.T, ctx context.Context, rig *relayRig, rl *relay.Relay, got *relayConsumer) int {
	t.Helper()
	awaitCaughtUp(t, ctx, rig)
	dups := requireDelivered(t, rig, got)
	require.Equal(t, relay.CircuitClosed, rl.Health().Circuit)
	// The cursor moves before the relay counts the piece published: wait
	// for the count (make test read it 0 of 21 once).
	want := uint64(len(rig.committedIDs()))
	waitFor(t, ctx, "every event counted published", func() (bool, string) {
		st := rl.Stats()
		return st.Published == want, fmt.Sprintf("%d of %d", st.Published, want)
	})
	st := rl.Stats()
	require.Zero(t, st.Retries)
	require.Zero(t, st.Parked)
	return dups
}

// emitOutageEvents emits outageEvents events of three keys, one or two a
// transaction.
func emitOutageEvents(t *testing.T, ctx context.Context, rig *relayRig) {
	t.Helper()
	for i := 0; len(rig.committedIDs()) < outageEvents; i++ {
		require.NoError(t, rig.emit(ctx, []string{"a", "b", "c"}[i%3], 1+i%2, 0, false))
	}
}
