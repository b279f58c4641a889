package natspub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// requireClean fails when err carries payload bytes or header values.
func requireClean(t *testing.T, err error) {
	t.Helper()
	require.NotContains(t, err.Error(), "SECRET")
	require.NotContains(t, err.Error(), "pgoutbox:", "natspub: names the origin, once")
}

func TestClassification(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		js jetstream.JetStream
		ts testStream
	}
	setup := func(t *testing.T, cfg jetstream.StreamConfig) testBundle {
		t.Helper()
		js := connect(t, natsURL)
		return testBundle{js: js, ts: newStream(t, js, cfg)}
	}
	publisher := func(t *testing.T, b testBundle, cfg natspub.Config) *natspub.Publisher {
		t.Helper()
		cfg.SubjectPrefix = b.ts.Prefix
		p, err := natspub.New(b.js, cfg)
		require.NoError(t, err)
		return p
	}

	t.Run("AckTimeoutIsRetryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, jetstream.StreamConfig{})
		silence(t, b.js.Conn(), b.ts.Prefix+"silent")
		p := publisher(t, b, natspub.Config{AckTimeout: 100 * time.Millisecond})

		start := time.Now()
		errs := p.Publish(context.Background(), messages("silent", 3))
		require.Less(t, time.Since(start), 2*time.Second)
		for _, err := range errs {
			require.ErrorIs(t, err, natspub.ErrAckTimeout)
			require.False(t, outbox.IsPermanent(err))
			requireClean(t, err)
		}
	})
	t.Run("HeaderNATSCannotCarryIsPermanent", func(t *testing.T) {
		t.Parallel()
		// Rows written around Emit: NATS would refuse the name (and the
		// client's error is retryable) or change the value.
		b := setup(t, jetstream.StreamConfig{})
		p := publisher(t, b, natspub.Config{})
		msgs := messages("ok.rule", 4)
		msgs[0].Event.Headers["x/y"] = "v"
		msgs[1].Event.Headers["x-secret"] = "  SECRET  "
		msgs[2].Event.AggregateID = "line1\nline2"
		errs := p.Publish(context.Background(), msgs)
		for i, field := range []string{"Headers", "Headers", "AggregateID"} {
			require.True(t, outbox.IsPermanent(errs[i]), "%v", errs[i])
			require.ErrorIs(t, errs[i], outbox.ErrInvalidEvent)
			var verr *outbox.ValidationError
			require.ErrorAs(t, errs[i], &verr)
			require.Equal(t, field, verr.Field)
			requireClean(t, errs[i])
		}
		require.ErrorContains(t, errs[0], `"x/y"`)
		require.NoError(t, errs[3])
	})
	t.Run("MaxPayloadBoundary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, jetstream.StreamConfig{})
		p := publisher(t, b, natspub.Config{})
		limit := b.js.Conn().MaxPayload()
		msgs := messages("ok.edge", 2)
		// Headers plus data exactly at the server's max_payload, then one
		// byte more.
		for i, extra := range []int{0, 1} {
			msgs[i].Event.Payload = []byte(strings.Repeat("S", int(limit)-headerBytes(t, p, msgs[i])+extra))
		}
		errs := p.Publish(context.Background(), msgs)
		require.NoError(t, errs[0])
		requireTooLarge(t, errs[1], limit)
		require.Len(t, fetchAll(context.Background(), t, b.js, b.ts, p.Subject("ok.edge"), 2, quiet), 1)
	})
	t.Run("MaxPayloadIsPermanent", func(t *testing.T) {
		t.Parallel()
		// 1 MiB - 200 B of payload passes Emit's old default limit, but not
		// the server's default max_payload once the headers are added. It
		// is refused before it is sent, with a code that says so.
		b := setup(t, jetstream.StreamConfig{})
		p := publisher(t, b, natspub.Config{})
		limit := b.js.Conn().MaxPayload()
		msgs := messages("ok.big", 2)
		msgs[0].Event.Payload = []byte(strings.Repeat("SECRET", int(limit-200)/6))
		errs := p.Publish(context.Background(), msgs)
		requireTooLarge(t, errs[0], limit)
		require.NoError(t, errs[1])
		require.Len(t, fetchAll(context.Background(), t, b.js, b.ts, p.Subject("ok.big"), 2, quiet), 1)
	})
	t.Run("MissingStreamIsRetryable", func(t *testing.T) {
		t.Parallel()
		// Events published before their stream exists fail, retryably, and
		// are stored once it has been created.
		b := setup(t, jetstream.StreamConfig{})
		p := publisher(t, b, natspub.Config{})
		msgs := messages("late.x", 2)
		for _, err := range p.Publish(context.Background(), msgs) {
			require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
			require.False(t, outbox.IsPermanent(err), "%v", err)
			require.True(t, outbox.IsUnavailable(err), "no responders: %v", err)
			require.ErrorContains(t, err, "no stream captures the subject yet")
			requireClean(t, err)
		}
		late := createStream(t, b.js, b.ts.Name+"_late", p.Subject("late.>"))
		for _, err := range p.Publish(context.Background(), msgs) {
			require.NoError(t, err)
		}
		info, err := late.Info(context.Background())
		require.NoError(t, err)
		require.Equal(t, uint64(2), info.State.Msgs)
	})
	t.Run("StalledClientIsRetryable", func(t *testing.T) {
		t.Parallel()
		// The jetstream client's own cap (2) fills with messages nobody
		// acknowledges; the rest cannot even be sent.
		nc, err := nats.Connect(natsURL)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2))
		require.NoError(t, err)
		b := setup(t, jetstream.StreamConfig{})
		silence(t, nc, b.ts.Prefix+"silent")
		b.js = js
		p := publisher(t, b, natspub.Config{AckTimeout: 100 * time.Millisecond})

		errs := p.Publish(context.Background(), messages("silent", 4))
		require.ErrorIs(t, errs[0], natspub.ErrAckTimeout)
		require.ErrorIs(t, errs[3], jetstream.ErrTooManyStalledMsgs)
		for _, err := range errs {
			require.False(t, outbox.IsPermanent(err), "%v", err)
			require.True(t, outbox.IsUnavailable(err), "no acks: %v", err)
		}
	})
	t.Run("StreamMaxMsgSizeIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, jetstream.StreamConfig{MaxMsgSize: 2048})
		p := publisher(t, b, natspub.Config{})
		msgs := messages("ok.sized", 2)
		msgs[1].Event.Payload = []byte(strings.Repeat("SECRET", 1000))
		errs := p.Publish(context.Background(), msgs)
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], jetstream.ErrStreamMessageExceedsMaximum)
		require.True(t, outbox.IsPermanent(errs[1]))
		requireClean(t, errs[1])
	})
}

// TestPermissionViolation runs on a server of its own, whose user may not
// publish on the stream's subjects.
func TestPermissionViolation(t *testing.T) {
	t.Parallel()
	s, err := startServer(&server.Options{
		StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "app", Password: "app", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"denied.>"}},
			}},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	admin := connect(t, s.ClientURL(), nats.UserInfo("admin", "admin"))
	_, err = admin.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DENIED", Subjects: []string{"denied.>"}})
	require.NoError(t, err)

	// The server answers a denied publish with an asynchronous -ERR only;
	// swallow it rather than let nats.go log it.
	app := connect(t, s.ClientURL(), nats.UserInfo("app", "app"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	p, err := natspub.New(app, natspub.Config{AckTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	for _, err := range p.Publish(context.Background(), messages("denied.x", 2)) {
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.True(t, outbox.IsPermanent(err))
		requireClean(t, err)
	}
}

// TestConcurrentPublish shares one publisher, and a jetstream client whose
// in-flight cap is far below the publisher's window, between goroutines:
// every message is confirmed, none is lost, none is stored twice.
func TestConcurrentPublish(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16))
	require.NoError(t, err)
	ts := newStream(t, js, jetstream.StreamConfig{})
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix})
	require.NoError(t, err)

	const workers, perWorker = 8, 250
	var wg sync.WaitGroup
	errc := make(chan error, workers*perWorker)
	for range workers {
		wg.Go(func() {
			for _, err := range p.Publish(context.Background(), messages("ok.many", perWorker)) {
				if err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	require.NoError(t, errors.Join(collect(errc)...))

	info, err := ts.stream.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(workers*perWorker), info.State.Msgs)
}

func TestPublishDeadlineWithoutAcks(t *testing.T) {
	t.Parallel()
	js := connect(t, natsURL)
	ts := newStream(t, js, jetstream.StreamConfig{})
	silence(t, js.Conn(), ts.Prefix+"silent")
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix, MaxPending: 4})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, messages("silent", 20))
	require.Less(t, time.Since(start), time.Second, "Publish must return when ctx ends, not after AckTimeout")
	for _, err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, outbox.IsPermanent(err))
		require.True(t, outbox.IsUnavailable(err), "the whole call timed out: %v", err)
	}
}

// silence subscribes to subject without ever answering: a publish there
// gets neither "no responders" nor a PubAck.
func silence(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	_, err := nc.Subscribe(subject, func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
}

// headerBytes is the size of m's encoded headers, as the server counts
// them against its max_payload.
func headerBytes(t *testing.T, p *natspub.Publisher, m outbox.Message) int {
	t.Helper()
	m.Event.Payload = nil
	msg, err := natspub.BuildMsg(0, p.Subject(m.Destination), m.Event.ID.String(), outbox.DefaultSource, m.Event, 0)
	require.NoError(t, err)
	return msg.Size() - len(msg.Subject)
}

// requireTooLarge checks that err refuses a message over the server's
// max_payload, limit, before sending it: permanent, invalid_event, naming
// the limit.
func requireTooLarge(t *testing.T, err error, limit int64) {
	t.Helper()
	require.True(t, outbox.IsPermanent(err), "%v", err)
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.ErrorIs(t, err, nats.ErrMaxPayload)
	require.ErrorContains(t, err, fmt.Sprintf("the server's max_payload of %d bytes", limit))
	requireClean(t, err)
}

// createStream creates a stream that captures subject and deletes it at
// cleanup.
func createStream(t *testing.T, js jetstream.JetStream, name, subject string) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return s
}

func messages(dest string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Destination: dest, Event: outboxtest.NewEvent(i)}
	}
	return msgs
}

func collect(errc <-chan error) []error {
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errs
}
