package natspub_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

// keyMessages returns n messages to dest of events of one order key.
func keyMessages(dest, key string, n int) []outbox.Message {
	msgs := messages(dest, n)
	for i := range msgs {
		msgs[i].Event.PartitionKey = key
	}
	return msgs
}

// storedIDs returns the event IDs ts holds, in stream order, after
// checking from the stream's state that it holds exactly n messages.
func storedIDs(t *testing.T, js jetstream.JetStream, ts testStream, n int) []string {
	t.Helper()
	ctx := runContext(t)
	info, err := ts.stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, n, info.State.Msgs)
	var ids []string
	for _, m := range fetchAll(ctx, t, js, ts, ts.Prefix+">", n, time.Second) {
		ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
	}
	return ids
}

func idsOf(msgs []outbox.Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Event.ID.String()
	}
	return ids
}

// requireStopped checks that the messages after failed report
// ErrNotAttempted, retryable and clean, and that failed does not.
func requireStopped(t *testing.T, errs []error, failed int) {
	t.Helper()
	require.Error(t, errs[failed])
	require.NotErrorIs(t, errs[failed], outbox.ErrNotAttempted)
	for i := failed + 1; i < len(errs); i++ {
		require.ErrorIs(t, errs[i], outbox.ErrNotAttempted, "message %d", i)
		require.False(t, outbox.IsPermanent(errs[i]))
		requireClean(t, errs[i])
	}
}

// setupOrdered returns a Publisher with KeyOrder on a stream of its own
// with cfg's limits.
func setupOrdered(t *testing.T, cfg jetstream.StreamConfig) (jetstream.JetStream, testStream, *natspub.Publisher) {
	t.Helper()
	js := connect(t, natsURL)
	ts := newStream(t, js, cfg)
	p, err := natspub.New(js, natspub.Config{SubjectPrefix: ts.Prefix, KeyOrder: true})
	require.NoError(t, err)
	require.True(t, p.PublishesKeysInOrder())
	return js, ts, p
}

func TestPublishKeyOrder(t *testing.T) {
	t.Parallel()

	const n, bad = 100, 50

	t.Run("OffByDefault", func(t *testing.T) {
		t.Parallel()
		_, _, p := setupPublisher(t)
		require.False(t, p.PublishesKeysInOrder())
	})

	t.Run("RunArrivesInOrder", func(t *testing.T) {
		t.Parallel()
		js, ts, p := setupOrdered(t, jetstream.StreamConfig{})
		msgs := keyMessages("ok.run", "hot", n)
		for i, err := range p.Publish(t.Context(), msgs) {
			require.NoError(t, err, "message %d", i)
		}
		require.Equal(t, idsOf(msgs), storedIDs(t, js, ts, n))
	})

	// Message bad fails (its subject has no stream, or it is too large
	// for the stream); the rest of the key is not attempted and not
	// stored; once the cause is fixed, a Publish of the remainder
	// completes the run in order.
	for _, tc := range []struct {
		name      string
		permanent bool
		spoil     func(m *outbox.Message)
		fix       func(cfg *jetstream.StreamConfig, prefix string)
	}{
		{
			name:  "NoStreamForSubject",
			spoil: func(m *outbox.Message) { m.Destination = "later.run" },
			fix: func(cfg *jetstream.StreamConfig, prefix string) {
				cfg.Subjects = append(cfg.Subjects, prefix+"later.>")
			},
		},
		{
			name:      "TooLargeForTheStream",
			permanent: true,
			spoil:     func(m *outbox.Message) { m.Event.Payload = []byte(`"` + strings.Repeat("x", 4096) + `"`) },
			fix:       func(cfg *jetstream.StreamConfig, _ string) { cfg.MaxMsgSize = -1 },
		},
	} {
		t.Run("FailureInTheMiddle/"+tc.name, func(t *testing.T) {
			t.Parallel()
			js, ts, p := setupOrdered(t, jetstream.StreamConfig{MaxMsgSize: 2048})
			msgs := keyMessages("ok.run", "hot", n)
			tc.spoil(&msgs[bad])

			errs := p.Publish(t.Context(), msgs)
			for i, err := range errs[:bad] {
				require.NoError(t, err, "message %d", i)
			}
			requireStopped(t, errs, bad)
			require.Equal(t, tc.permanent, outbox.IsPermanent(errs[bad]), "%v", errs[bad])
			require.Equal(t, idsOf(msgs[:bad]), storedIDs(t, js, ts, bad))

			cfg := ts.stream.CachedInfo().Config
			tc.fix(&cfg, ts.Prefix)
			_, err := js.UpdateStream(t.Context(), cfg)
			require.NoError(t, err)
			for i, err := range p.Publish(t.Context(), msgs[bad:]) {
				require.NoError(t, err, "retry, message %d", bad+i)
			}
			require.Equal(t, idsOf(msgs), storedIDs(t, js, ts, n))
		})
	}

	// The context ends while message bad, which no stream answers, is in
	// flight: it reports the context's end, the rest of the key
	// ErrNotAttempted, and none of them is stored.
	t.Run("ContextEndsInTheMiddle", func(t *testing.T) {
		t.Parallel()
		js, ts, p := setupOrdered(t, jetstream.StreamConfig{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, err := js.Conn().Subscribe(ts.Prefix+"silent", func(*nats.Msg) { cancel() })
		require.NoError(t, err)
		require.NoError(t, js.Conn().Flush())
		msgs := keyMessages("ok.run", "hot", n)
		msgs[bad].Destination = "silent"
		errs := p.Publish(ctx, msgs)
		for i, err := range errs[:bad] {
			require.NoError(t, err, "message %d", i)
		}
		require.ErrorIs(t, errs[bad], context.Canceled)
		requireStopped(t, errs, bad)
		require.Equal(t, idsOf(msgs[:bad]), storedIDs(t, js, ts, bad))
	})

	// A failing key stops only itself: the other keys of the call, and
	// its messages without a key, go on.
	t.Run("KeysSideBySide", func(t *testing.T) {
		t.Parallel()
		js, ts, p := setupOrdered(t, jetstream.StreamConfig{})
		good, failing := keyMessages("ok.good", "good", 20), keyMessages("missing.bad", "bad", 20)
		var msgs []outbox.Message
		for i := range 20 {
			msgs = append(msgs, good[i], failing[i])
		}
		keyless := outboxtest.NewEvent(99)
		keyless.PartitionKey, keyless.AggregateID = "", ""
		msgs = append(msgs, outbox.Message{Destination: "ok.keyless", Event: keyless})
		errs := p.Publish(t.Context(), msgs)
		require.ErrorIs(t, errs[1], jetstream.ErrNoStreamResponse)
		for i := range 20 {
			require.NoError(t, errs[2*i], "good message %d", i)
			if i > 0 {
				require.ErrorIs(t, errs[2*i+1], outbox.ErrNotAttempted, "bad message %d", i)
			}
		}
		require.NoError(t, errs[40], "keyless message")
		ids := storedIDs(t, js, ts, 21)
		require.Contains(t, ids, keyless.ID.String())
		require.Equal(t, idsOf(good), slices.DeleteFunc(ids, func(id string) bool { return id == keyless.ID.String() }))
	})
}
