package natspub_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// localNATS is the server the tests use when it answers with JetStream;
// .ci/run starts it. NATS_URL overrides it and must answer.
const localNATS = "nats://127.0.0.1:4222"

// natsURL is the server every test connects to, chosen in TestMain.
var natsURL string

func TestMain(m *testing.M) {
	url, stop, err := chooseServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "natspub tests:", err)
		os.Exit(1)
	}
	natsURL = url
	code := m.Run()
	stop()
	os.Exit(code)
}

// chooseServer returns NATS_URL when set, the local server when it answers
// with JetStream (unless NATSPUB_TEST_EMBEDDED=1), and otherwise an
// in-process server with JetStream in a temporary directory.
func chooseServer() (string, func(), error) {
	if os.Getenv("NATSPUB_TEST_EMBEDDED") == "1" {
		return embedded()
	}
	if url := os.Getenv("NATS_URL"); url != "" {
		if err := probe(url); err != nil {
			return "", nil, fmt.Errorf("NATS_URL %s: %w", url, err)
		}
		return url, func() {}, nil
	}
	if probe(localNATS) == nil {
		fmt.Fprintln(os.Stderr, "natspub tests: using the NATS server at", localNATS)
		if err := anchor(localNATS); err != nil {
			return "", nil, err
		}
		return localNATS, func() {}, nil
	}
	fmt.Fprintln(os.Stderr, "natspub tests: no NATS server at", localNATS, "- starting one in process")
	return embedded()
}

// anchor makes sure the shared server keeps one stream of ours that no
// test deletes. Seen here twice: with tests creating and deleting streams
// at once, the server removed its account's stream directory when one
// deletion left it empty, and a creation at that moment failed with
// "error creating store for stream" (10049) until it was recreated by
// hand. While one stream remains, the directory is never empty.
func anchor(url string) error {
	return withJetStream(url, 10*time.Second, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "pgoutbox_test_anchor", Subjects: []string{"pgoutbox_test_anchor"}, MaxMsgs: 1,
		})
		if err != nil {
			return fmt.Errorf("anchor stream: %w", err)
		}
		return nil
	})
}

// runContext returns a context that ends with the test, or a little
// before the run's go test -timeout, with a cause that says so: no fixed
// cap, which a loaded machine could reach (issue 24). The root module's
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

// withJetStream connects to url (without reconnecting) and runs f with a
// JetStream context, bounded by timeout.
func withJetStream(url string, timeout time.Duration, f func(context.Context, jetstream.JetStream) error) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return f(ctx, js)
}

// embedded starts an in-process server for the whole package run.
func embedded() (string, func(), error) {
	dir, err := os.MkdirTemp("", "natspub-js-")
	if err != nil {
		return "", nil, err
	}
	s, err := startServer(&server.Options{StoreDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return s.ClientURL(), func() { s.Shutdown(); s.WaitForShutdown(); _ = os.RemoveAll(dir) }, nil
}

// probe checks that url answers and has JetStream.
func probe(url string) error {
	return withJetStream(url, 2*time.Second, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// startServer starts an in-process server on opts.Port, or on a random
// port when it is 0, with JetStream storing in opts.StoreDir, or without
// JetStream when StoreDir is empty.
func startServer(opts *server.Options) (*server.Server, error) {
	opts.Host = "127.0.0.1"
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	opts.JetStream, opts.NoLog, opts.NoSigs = opts.StoreDir != "", true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("in-process nats-server did not start")
	}
	return s, nil
}

// connect returns a JetStream context on a connection closed at cleanup.
func connect(tb testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(url, opts...)
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(tb, err)
	return js
}

var streamSeq atomic.Int64

// testStream is a stream of its own for one test: it captures
// Prefix+"ok.>" and nothing else under Prefix.
type testStream struct {
	Name   string
	Prefix string
	stream jetstream.Stream
}

// newStream creates a stream unique to the test and deletes it at
// cleanup. cfg may set limits; its name and subjects are filled in.
func newStream(tb testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) testStream {
	tb.Helper()
	tag := fmt.Sprintf("%s_%d_%s", sanitize(tb.Name()), streamSeq.Add(1), strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
	ts := testStream{Name: "natspub_" + tag, Prefix: "natspubtest." + tag + "."}
	cfg.Name, cfg.Subjects = ts.Name, []string{ts.Prefix + "ok.>"}
	s, err := js.CreateStream(runContext(tb), cfg)
	require.NoError(tb, err)
	ts.stream = s
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, ts.Name)
	})
	return ts
}

// sanitize keeps the letters and digits of a test name, for stream names
// and subject tokens.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[len(s)-40:]
	}
	return s
}

// fetchAll reads every message stored on subject, stopping after quiet
// passes with nothing new, after n messages, or when ctx ends.
func fetchAll(ctx context.Context, tb testing.TB, js jetstream.JetStream, ts testStream, subject string, n int, quiet time.Duration) []jetstream.Msg {
	tb.Helper()
	cons, err := js.OrderedConsumer(ctx, ts.Name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	require.NoError(tb, err)
	var got []jetstream.Msg
	for len(got) < n && ctx.Err() == nil {
		batch, err := cons.Fetch(n-len(got), jetstream.FetchMaxWait(quiet))
		require.NoError(tb, err)
		before := len(got)
		for msg := range batch.Messages() {
			got = append(got, msg)
		}
		if len(got) == before {
			break // quiet: nothing more is stored
		}
	}
	return got
}
