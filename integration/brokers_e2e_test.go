package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// brokerDest is the destination every event of these tests is routed to.
const brokerDest = "late"

// TestLateDestinationEndToEnd: events emitted before their NATS stream or
// Kafka topic exists are retried, not dead-lettered, and are delivered
// once it is created. A missing Kafka topic costs attempts; a subject no
// NATS stream captures gets "no responders", which natspub reports as
// unavailable (the server says the same while JetStream is down), so the
// events wait behind the dispatcher's open circuit without spending any.
func TestLateDestinationEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("NATS", func(t *testing.T) {
		t.Parallel()
		runLateDestination(t, newTestBroker(t, "nats", natsServer(t)))
	})
	t.Run("Kafka", func(t *testing.T) {
		t.Parallel()
		runLateDestination(t, newTestBroker(t, "kafka", strings.Join(kafkaSeeds(t), ",")))
	})
}

// runLateDestination emits events for brokerDest, dispatches them through
// b's publisher until every one has failed at least twice, checks that
// none is FAILED, then creates the destination on b and waits until every
// event is SENT and received.
func runLateDestination(t *testing.T, b testBroker) {
	t.Helper()
	// Ends at return, as the dispatchers this starts must.
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	db := pgtest.NewMigrated(t)
	ids := emitEvents(t, ctx, db, 3, nil)
	// A short backoff and a budget far larger than the test needs: an
	// outage must cost attempts, not dead-letter the event.
	d := runDispatcher(t, ctx, db, dispatcher.Config{
		Publisher: b.pub, RouteFunc: func(outbox.Event) string { return brokerDest },
		PollInterval: 20 * time.Millisecond, MaxAttempts: 1000,
		Backoff:           outbox.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond},
		CircuitMaxBackoff: 100 * time.Millisecond,
	})

	if b.kind == "nats" {
		waitFor(t, ctx, "the circuit open and probed", func() (bool, string) {
			s := d.Stats()
			return s.CircuitOpens > 0 && s.OutageReturned >= uint64(len(ids)+2), fmt.Sprintf("%+v", s)
		})
		require.Zero(t, countRows(t, ctx, db, "attempts > 0 OR status = 'FAILED'"), "no responders spent attempts")
	} else {
		waitFor(t, ctx, "every event to fail twice, or end", func() (bool, string) {
			n := countRows(t, ctx, db, "attempts >= 2 OR status = 'FAILED'")
			return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
		})
		require.Zero(t, countRows(t, ctx, db, "status = 'FAILED'"), "a missing destination dead-lettered events")
		require.Equal(t, len(ids), countRows(t, ctx, db, "last_error_code = 'publish_error'"))
	}

	got := newReceived()
	b.create(t, ctx, "LATE", brokerDest, got)
	awaitSentAndReceived(t, ctx, db, ids, got)
}

// TestDefaultLimitsFitBrokers: an event at every default limit of the
// emitter (a payload of emitter.DefaultMaxPayloadBytes, 64 headers of
// 16 KiB in all, every text field at its limit in two-byte characters)
// is accepted by Emit and delivered by natspub to a server with the
// default max_payload and by kafkapub to a cluster through a client with
// franz-go's default batch limit.
func TestDefaultLimitsFitBrokers(t *testing.T) {
	t.Parallel()
	t.Run("NATS", func(t *testing.T) {
		t.Parallel()
		b := newTestBroker(t, "nats", embeddedNATS(t))
		nc, _ := createNATSStream(t, context.Background(), b.addr, "PGOUTBOX_LIMITS", b.prefix+">")
		require.Equal(t, int64(1<<20), nc.MaxPayload(), "the server's default max_payload")
		dispatchLargest(t, b.pub)
	})
	t.Run("Kafka", func(t *testing.T) {
		t.Parallel()
		b := newTestBroker(t, "kafka", strings.Join(kafkaSeeds(t), ","))
		b.create(t, context.Background(), "LIMITS", brokerDest, nil)
		dispatchLargest(t, b.pub)
	})
}

// dispatchLargest emits the largest event the emitter's defaults accept
// and checks that the dispatcher sends it through pub on the first
// attempt.
func dispatchLargest(t *testing.T, pub outbox.Publisher) {
	t.Helper()
	// Ends at return, as the dispatchers this starts must.
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	db := pgtest.NewMigrated(t)
	ids := emitEvents(t, ctx, db, 1, largestEvent)
	runDispatcher(t, ctx, db, dispatcher.Config{
		Publisher: pub, RouteFunc: func(outbox.Event) string { return brokerDest },
		PollInterval: 20 * time.Millisecond,
	})
	require.Equal(t, "SENT ", awaitEnd(t, ctx, db, ids[0]))
}

// largestEvent sets every field of e to the most the emitter's default
// limits accept, in two-byte characters where the broker may escape them.
func largestEvent(e *outbox.Event) {
	wide := func(n int) string { return strings.Repeat("é", n/2) }
	e.Type, e.AggregateType, e.ContentType = wide(255), wide(255), wide(255)
	e.AggregateID, e.PartitionKey, e.IdempotencyKey = wide(1024), wide(1024), wide(1024)
	e.Headers = make(map[string]string, emitter.DefaultMaxHeaders)
	for i := range emitter.DefaultMaxHeaders {
		name := fmt.Sprintf("x-%02d", i)
		e.Headers[name] = strings.Repeat("v", emitter.DefaultMaxHeaderBytes/emitter.DefaultMaxHeaders-len(name))
	}
	e.Payload = []byte(strings.Repeat("x", emitter.DefaultMaxPayloadBytes))
}

// emitEvents emits n events of type "order.created" in one committed
// transaction, each edited by edit when it is not nil, and returns their
// IDs.
func emitEvents(t *testing.T, ctx context.Context, db *pgtest.DB, n int, edit func(*outbox.Event)) []uuid.UUID {
	t.Helper()
	em, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{Type: "order.created", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		if edit != nil {
			edit(&events[i])
		}
	}
	ids, err := em.Emit(ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return ids
}

// testBroker is the broker of one end-to-end test: its address, a
// prefix of subjects or topics unique to the test, and a publisher for
// destinations under that prefix, closed when the test ends.
type testBroker struct {
	kind   string // "nats" or "kafka", as newPublisher takes it
	addr   string // the NATS URL, or the Kafka seeds separated by commas
	tag    string // e2eTag, in the prefix and the NATS stream name
	prefix string
	pub    outbox.Publisher
}

// newTestBroker returns the testBroker of kind at addr, with a fresh tag
// and the prefix "e2e", a separator ("." for NATS, "-" for Kafka), the
// tag and a dot.
func newTestBroker(t *testing.T, kind, addr string) testBroker {
	t.Helper()
	sep := "."
	if kind == "kafka" {
		sep = "-"
	}
	b := testBroker{kind: kind, addr: addr, tag: e2eTag()}
	b.prefix = "e2e" + sep + b.tag + "."
	pub, closePub, err := newPublisher(kind, addr, b.prefix)
	require.NoError(t, err)
	t.Cleanup(closePub)
	b.pub = pub
	return b
}

// create creates the destination dest of the test on the broker (for
// NATS a stream named PGOUTBOX_<name>_<tag> that captures
// every subject under the prefix, deleted when the test ends; for Kafka
// the topic prefix+dest) and, when got is not nil, consumes it into got
// until the test ends.
func (b testBroker) create(t *testing.T, ctx context.Context, name, dest string, got *received) {
	t.Helper()
	if b.kind == "nats" {
		_, stream := createNATSStream(t, ctx, b.addr, "PGOUTBOX_"+name+"_"+b.tag, b.prefix+">")
		if got != nil {
			consumeStream(t, stream, got.add)
		}
		return
	}
	seeds := strings.Split(b.addr, ",")
	createKafkaTopic(t, ctx, seeds, b.prefix+dest)
	if got != nil {
		consumeKafka(t, seeds, b.prefix+dest, got.add)
	}
}

// e2eTag returns 12 random hex digits, to make names unique to a test.
func e2eTag() string {
	return strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
}

// createNATSStream connects to url and creates a stream named name that
// captures subject, deleted when the test ends.
func createNATSStream(t *testing.T, ctx context.Context, url, name, subject string) (*nats.Conn, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return nc, stream
}

// createKafkaTopic creates topic, with one partition, on the cluster at
// seeds.
func createKafkaTopic(t *testing.T, ctx context.Context, seeds []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
}

// countRows counts the outbox's events that match where, wherever they
// are (the outbox table, its dead letters, its SENT history).
func countRows(t *testing.T, ctx context.Context, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+testdb.AllRows(db.Table())+" AS e WHERE "+where).Scan(&n))
	return n
}

// awaitEnd waits until the outbox row id is SENT or FAILED and returns
// "STATUS last_error_code" ("SENT " when it has no code).
func awaitEnd(t *testing.T, ctx context.Context, db *pgtest.DB, id uuid.UUID) string {
	t.Helper()
	var status, code string
	waitFor(t, ctx, "row "+id.String()+" to end", func() (bool, string) {
		err := db.Pool.QueryRow(ctx, `SELECT status, coalesce(last_error_code, '') FROM `+testdb.AllRows(db.Table())+` AS e
			WHERE id = $1 ORDER BY place = 'T' DESC LIMIT 1`, id).
			Scan(&status, &code)
		if err != nil {
			return false, err.Error()
		}
		return status == "SENT" || status == "FAILED", status + " " + code
	})
	return status + " " + code
}
