package kafkapub_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/kafkapub"
)

// TestPublishUnavailable stops the cluster under a Publisher: a call whose
// deadline passes reports every message unavailable (franz-go retries
// until then), as does a call on a closed client and one whose records
// time out in the client (kgo.RecordDeliveryTimeout) on an address where
// nothing listens; a call the caller cancels does not.
func TestPublishUnavailable(t *testing.T) {
	t.Parallel()
	b := newFakeBroker(t)
	topic := b.newTopic(t)
	p := b.publisher(t, kafkapub.Config{})
	msgs := toTopic(topic, secretEvent(1), secretEvent(2))
	require.Equal(t, []error{nil, nil}, p.Publish(context.Background(), msgs))
	b.fake.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	requireUnavailable(t, p.Publish(ctx, msgs), true)

	cancelled, cancelNow := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancelNow)
	requireUnavailable(t, p.Publish(cancelled, msgs), false)

	refused := (&broker{seeds: []string{"127.0.0.1:1"}}).publisher(t, kafkapub.Config{},
		kgo.RecordDeliveryTimeout(time.Second))
	errs := refused.Publish(context.Background(), msgs)
	requireUnavailable(t, errs, true)
	require.ErrorIs(t, errs[0], kgo.ErrRecordTimeout)

	p.Close()
	errs = p.Publish(context.Background(), msgs)
	requireUnavailable(t, errs, true)
	require.ErrorIs(t, errs[0], kgo.ErrClientClosed)
}

func requireUnavailable(t *testing.T, errs []error, want bool) {
	t.Helper()
	for i, err := range errs {
		require.Error(t, err, "message %d", i)
		require.Equal(t, want, outbox.IsUnavailable(err), "message %d: %v", i, err)
		require.False(t, outbox.IsPermanent(err), "message %d: %v", i, err)
	}
}
