package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
)

func fullEvent() outbox.Event {
	return outbox.Event{
		ID:             uuid.Must(uuid.NewV7()),
		Type:           "order.created",
		AggregateType:  "order",
		AggregateID:    "o-1",
		PartitionKey:   "customer-7",
		IdempotencyKey: "idem-1",
		ContentType:    outbox.ContentTypeJSON,
		Headers:        map[string]string{"traceparent": "00-abc-def-01", "x-tenant": "t1"},
		Payload:        []byte(`{"id":1}`),
		Attempt:        2,
		CreatedAt:      time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.FixedZone("X", 3600)),
	}
}

func headerValue(hs []kgo.RecordHeader, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestHeaders(t *testing.T) {
	t.Parallel()

	t.Run("EmptyFieldsAreLeftOut", func(t *testing.T) {
		t.Parallel()
		e := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "t"}
		hs := encodeHeaders(e, outbox.DefaultSource)
		require.Len(t, hs, 4, "the four required CloudEvents attributes")
		got, err := Decode(&kgo.Record{Headers: hs})
		require.NoError(t, err)
		require.Equal(t, e, got)
	})

	t.Run("NamesAreStable", func(t *testing.T) {
		t.Parallel()
		e := fullEvent()
		hs := encodeHeaders(e, "urn:acme:orders")
		require.Len(t, hs, 13)
		// The binary content mode of the CloudEvents Kafka binding.
		for name, want := range map[string]string{
			"ce_specversion": "1.0", "ce_source": "urn:acme:orders",
			"ce_id": e.ID.String(), "ce_type": "order.created",
			"ce_aggregatetype": "order", "ce_subject": "o-1",
			"ce_partitionkey": "customer-7", "ce_idempotencykey": "idem-1",
			"content-type": "application/json", "ce_attempt": "2",
			"ce_time": "2026-03-04T04:06:07.891011Z", "traceparent": "00-abc-def-01",
		} {
			got, ok := headerValue(hs, name)
			require.True(t, ok, name)
			require.Equal(t, want, got, name)
		}
	})

	t.Run("ReservedPrefixIsRefused", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, checkHeaderNames(0, fullEvent()))
		for _, name := range []string{"CE_type", "ce_anything", "Content-Type"} {
			e := fullEvent()
			e.Headers[name] = "spoofed"
			err := checkHeaderNames(3, e)
			require.True(t, outbox.IsPermanent(err), name)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			var verr *outbox.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, 3, verr.Index, "the message's position in the Publish call")
			require.ErrorContains(t, err, `"`+name+`"`)
			require.NotContains(t, err.Error(), "spoofed")
			require.True(t, strings.HasPrefix(err.Error(), "permanent: kafkapub: invalid event 3: "), err.Error())
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		want := fullEvent()
		got, err := Decode(&kgo.Record{Value: want.Payload, Headers: encodeHeaders(want, outbox.DefaultSource)})
		require.NoError(t, err)
		require.True(t, want.CreatedAt.Equal(got.CreatedAt))
		want.CreatedAt = got.CreatedAt
		require.Equal(t, want, got)
	})
}

func TestDecode(t *testing.T) {
	t.Parallel()

	const value = "VALUE-THAT-MUST-NOT-LEAK"
	cases := []struct {
		name    string
		headers []kgo.RecordHeader
		header  string
	}{
		{"BadAttempt", []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte(uuid.NewString())}, {Key: HeaderEventType, Value: []byte("t")},
			{Key: HeaderAttempt, Value: []byte(value)},
		}, HeaderAttempt},
		// Found by FuzzDecode: a negative attempt decoded as is, unlike
		// natspub, and an Event's Attempt is 1-based.
		{"NegativeAttempt", []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte(uuid.NewString())}, {Key: HeaderEventType, Value: []byte("t")},
			{Key: HeaderAttempt, Value: []byte("-3")},
		}, HeaderAttempt},
		{"ZeroAttempt", []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte(uuid.NewString())}, {Key: HeaderEventType, Value: []byte("t")},
			{Key: HeaderAttempt, Value: []byte("0")},
		}, HeaderAttempt},
		{"BadCreatedAt", []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte(uuid.NewString())}, {Key: HeaderEventType, Value: []byte("t")},
			{Key: HeaderCreatedAt, Value: []byte(value)},
		}, HeaderCreatedAt},
		{"BadEventID", []kgo.RecordHeader{{Key: HeaderEventID, Value: []byte(value)}}, HeaderEventID},
		{"MissingEventID", []kgo.RecordHeader{{Key: HeaderEventType, Value: []byte("t")}}, HeaderEventID},
		{"MissingType", []kgo.RecordHeader{{Key: HeaderEventID, Value: []byte(uuid.NewString())}}, HeaderEventType},
	}
	// Attributes this version does not know (another producer's, a later
	// version's) are read past, not taken for event headers.
	t.Run("UnknownAttribute", func(t *testing.T) {
		t.Parallel()
		e, err := Decode(&kgo.Record{Headers: []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte(uuid.NewString())}, {Key: HeaderEventType, Value: []byte("t")},
			{Key: "ce_dataschema", Value: []byte("/s")}, {Key: "x", Value: []byte("y")},
		}})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"x": "y"}, e.Headers)
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode(&kgo.Record{Headers: tc.headers, Value: []byte(value)})
			require.ErrorIs(t, err, ErrNotAnEvent)
			require.Contains(t, err.Error(), tc.header)
			require.NotContains(t, err.Error(), value)
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()

	permanent := []error{
		kerr.MessageTooLarge, kerr.RecordListTooLarge,
		kerr.InvalidRecord, kerr.InvalidTopicException, kerr.TopicAuthorizationFailed,
		kerr.ClusterAuthorizationFailed,
		fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), // as franz-go wraps it
	}
	retryable := []error{
		kerr.NotLeaderForPartition, kerr.NotEnoughReplicas, kerr.RequestTimedOut, kerr.UnknownServerError,
		kerr.SaslAuthenticationFailed, kgo.ErrRecordTimeout, kgo.ErrClientClosed, context.Canceled,
		kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, // a topic created late is an outage
		errors.New("dial tcp: connection refused"),
	}
	for _, cause := range permanent {
		err := classify("orders", cause)
		require.True(t, outbox.IsPermanent(err), "%v", cause)
		require.ErrorIs(t, err, cause)
		require.Contains(t, err.Error(), `"orders"`)
	}
	for _, cause := range retryable {
		err := classify("orders", cause)
		require.False(t, outbox.IsPermanent(err), "%v", cause)
		require.ErrorIs(t, err, cause)
	}
	require.NoError(t, classify("orders", nil))

	// What franz-go reports with every broker down (checked on a stopped
	// kfake cluster), a closed client and a broker without a leader say
	// the cluster is unavailable; the record's own problems, a missing
	// topic and a cancellation do not.
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	unavailable := []error{
		fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, fmt.Errorf("unable to dial: %w", dial)),
		kgo.ErrRecordTimeout, kgo.ErrRecordRetries, kgo.ErrClientClosed, dial,
		kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.BrokerNotAvailable, kerr.NotEnoughReplicas,
		kerr.RequestTimedOut, kerr.NetworkException, context.DeadlineExceeded,
	}
	for _, cause := range unavailable {
		err := classify("orders", cause)
		require.True(t, outbox.IsUnavailable(err), "%v", cause)
		require.ErrorIs(t, err, cause)
	}
	for _, cause := range append(permanent, kerr.UnknownTopicOrPartition, kerr.UnknownTopicID,
		kerr.UnknownServerError, context.Canceled) {
		require.False(t, outbox.IsUnavailable(classify("orders", cause)), "%v", cause)
	}

	for _, cause := range permanent {
		batchLevel := errors.Is(cause, kerr.MessageTooLarge) || errors.Is(cause, kerr.RecordListTooLarge) ||
			errors.Is(cause, kerr.InvalidRecord)
		require.Equal(t, batchLevel, inRejectedBatch(cause), "%v", cause)
	}
	for _, cause := range retryable {
		require.False(t, inRejectedBatch(cause), "%v", cause)
	}
	require.False(t, inRejectedBatch(nil))
}

func TestCheckTopic(t *testing.T) {
	t.Parallel()

	for _, ok := range []string{"a", "order.created", "A_b-9", strings.Repeat("x", 249)} {
		require.NoError(t, checkTopic(ok), ok)
	}
	for _, bad := range []string{"", ".", "..", "a b", "ordér", "a/b", strings.Repeat("x", 250)} {
		err := checkTopic(bad)
		require.True(t, outbox.IsPermanent(err), bad)
		require.ErrorIs(t, err, kerr.InvalidTopicException)
	}
}

func TestGate(t *testing.T) {
	t.Parallel()

	// queued waits until n callers wait for g's exclusive hold.
	queued := func(t *testing.T, g *gate, n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.queued == n
		}, 5*time.Second, time.Millisecond)
	}
	expired := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("AbandonedExclusiveWaitLetsSharersIn", func(t *testing.T) {
		t.Parallel()
		var g gate
		require.NoError(t, g.share(t.Context()))
		ctx, cancel := context.WithCancelCause(t.Context())
		locked := make(chan error, 1)
		go func() { locked <- g.lock(ctx) }()
		queued(t, &g, 1)
		shared := make(chan error, 1)
		go func() { shared <- g.share(t.Context()) }()
		cause := errors.New("gave up")
		cancel(cause)
		require.ErrorIs(t, <-locked, cause)
		require.NoError(t, <-shared)
	})

	t.Run("ExclusiveWaitsForSharers", func(t *testing.T) {
		t.Parallel()
		var g gate
		require.NoError(t, g.share(t.Context()))
		require.NoError(t, g.share(t.Context()))
		require.ErrorIs(t, g.lock(expired(t)), context.DeadlineExceeded)
		g.unshare()
		require.ErrorIs(t, g.lock(expired(t)), context.DeadlineExceeded)
		g.unshare()
		require.NoError(t, g.lock(t.Context()))
		require.ErrorIs(t, g.lock(expired(t)), context.DeadlineExceeded)
		require.ErrorIs(t, g.share(expired(t)), context.DeadlineExceeded)
		g.unlock()
		require.NoError(t, g.share(t.Context()))
	})

	t.Run("GatesArePerTopicAndForgotten", func(t *testing.T) {
		t.Parallel()
		var gs gates
		unshare, err := gs.share(t.Context(), []string{"a", "b"})
		require.NoError(t, err)
		_, err = gs.lock(expired(t), "b")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		unlock, err := gs.lock(t.Context(), "c")
		require.NoError(t, err)
		_, err = gs.share(expired(t), []string{"a", "c"})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		unlock()
		unshare()
		unlock, err = gs.lock(t.Context(), "a")
		require.NoError(t, err)
		unlock()
		require.Empty(t, gs.byTopic)
	})

	t.Run("QueuedExclusiveKeepsNewSharersOut", func(t *testing.T) {
		t.Parallel()
		var g gate
		require.NoError(t, g.share(t.Context()))
		locked := make(chan error, 1)
		go func() { locked <- g.lock(t.Context()) }()
		queued(t, &g, 1)
		require.ErrorIs(t, g.share(expired(t)), context.DeadlineExceeded)
		shared := make(chan error, 1)
		go func() { shared <- g.share(t.Context()) }()
		g.unshare()
		require.NoError(t, <-locked)
		select {
		case err := <-shared:
			t.Fatalf("shared hold taken while the exclusive one is held: %v", err)
		default:
		}
		g.unlock()
		require.NoError(t, <-shared)
	})
}
