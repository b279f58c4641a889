package amqppub_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// localAMQP is the broker the tests use; .ci/run starts it. AMQP_URL
// overrides it.
const localAMQP = "amqp://guest:guest@127.0.0.1:5672/"

// amqpURL is the broker every test connects to, chosen in TestMain.
var amqpURL string

// TestMain checks that the broker answers. When it does not, the run
// fails under CI=true (a missing service must not pass as skipped tests)
// and is skipped with a message otherwise.
func TestMain(m *testing.M) {
	amqpURL = localAMQP
	if u := os.Getenv("AMQP_URL"); u != "" {
		amqpURL = u
	}
	if err := probe(amqpURL); err != nil {
		msg := fmt.Sprintf("amqppub tests: no RabbitMQ at %s (set AMQP_URL, or start it; .ci/run does): %v", redacted(amqpURL), err)
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, msg+" - skipping the package's tests")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// redacted hides the password of the test URL in messages.
func redacted(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "<AMQP_URL>"
	}
	uri.Password = "xxxxx"
	return uri.String()
}

// probe dials url once.
func probe(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// runContext returns a context that ends with the test, or a little
// before the run's go test -timeout, with a cause that says so: no fixed
// cap, which a loaded machine could reach. The root module's
// internal/testctx does the same; a publisher imports no internal package
// of the core.
func runContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx := tb.Context()
	t, ok := tb.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return ctx
	}
	deadline, ok := t.Deadline()
	if !ok {
		return ctx
	}
	grace := min(time.Minute, time.Until(deadline)/10)
	ctx, cancel := context.WithDeadlineCause(ctx, deadline.Add(-grace),
		fmt.Errorf("the go test -timeout of this run ends at %s", deadline.Format(time.TimeOnly)))
	tb.Cleanup(cancel)
	return ctx
}

// admin is a connection and channel for declaring and reading the test
// topology, closed at cleanup.
type admin struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(tb testing.TB) *admin {
	tb.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(tb, err)
	return &admin{conn: conn, ch: ch}
}

var nameSeq atomic.Int64

// uniqueName returns a broker name unique to the test.
func uniqueName(tb testing.TB, kind string) string {
	return fmt.Sprintf("amqppubtest.%s.%s.%d.%s", kind, sanitize(tb.Name()), nameSeq.Add(1), uuid.NewString()[:8])
}

// sanitize keeps the letters and digits of a test name.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if len(s) > 60 {
		s = s[len(s)-60:]
	}
	return s
}

// exchange declares a topic exchange unique to the test, deleted at
// cleanup, and returns its name.
func (a *admin) exchange(tb testing.TB) string {
	tb.Helper()
	name := uniqueName(tb, "x")
	require.NoError(tb, a.ch.ExchangeDeclare(name, amqp.ExchangeTopic, false, false, false, false, nil))
	tb.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
	return name
}

// queue declares a queue unique to the test with args, binds it to
// exchange with key (no binding when exchange is ""), deletes it at
// cleanup, and returns its name.
func (a *admin) queue(tb testing.TB, exchange, key string, args amqp.Table) string {
	tb.Helper()
	name := uniqueName(tb, "q")
	_, err := a.ch.QueueDeclare(name, false, false, false, false, args)
	require.NoError(tb, err)
	tb.Cleanup(func() { _, _ = a.ch.QueueDelete(name, false, false, false) })
	if exchange != "" {
		require.NoError(tb, a.ch.QueueBind(name, key, exchange, false, nil))
	}
	return name
}

// read consumes queue until n messages arrived, nothing arrived for quiet,
// or ctx ended, and returns them in arrival order.
func (a *admin) read(ctx context.Context, tb testing.TB, queue string, n int, quiet time.Duration) []amqp.Delivery {
	tb.Helper()
	ch, err := a.conn.Channel()
	require.NoError(tb, err)
	defer func() { _ = ch.Close() }()
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", true, false, false, false, nil)
	require.NoError(tb, err)
	var got []amqp.Delivery
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	for len(got) < n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return got
			}
			got = append(got, d)
			timer.Reset(quiet)
		case <-timer.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// depth is how many messages queue holds: exact once every publish to it
// was confirmed (a confirm means the queue took the message), so tests
// count with it rather than by reading until nothing came for a while.
func depth(t *testing.T, a *admin, queue string) int {
	t.Helper()
	ch, err := a.conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	st, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	return st.Messages
}

// newEvent returns an event with a fresh ID and a payload and header
// holding secret, which no error may contain.
func newEvent(i int) outbox.Event {
	return outbox.Event{
		ID: uuid.Must(uuid.NewV7()), Type: "amqppub.tested", AggregateID: fmt.Sprintf("agg-%d", i),
		PartitionKey: fmt.Sprintf("k%d", i%3), ContentType: outbox.ContentTypeJSON,
		Headers: map[string]string{"x-secret": secret},
		Payload: []byte(fmt.Sprintf(`{"i":%d,"secret":%q}`, i, secret)), Attempt: 1, CreatedAt: time.Now(),
	}
}

const secret = "AMQPPUB-SECRET-VALUE"

// messages returns n messages for dest.
func messages(dest string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Destination: dest, Event: newEvent(i)}
	}
	return msgs
}

// requireClean fails when err's text holds a payload or header value.
func requireClean(tb testing.TB, err error) {
	tb.Helper()
	require.NotContains(tb, err.Error(), secret)
}

// amqpParse returns the host:port of an AMQP URL.
func amqpParse(u string) (string, error) {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s:%d", uri.Host, uri.Port), nil
}
