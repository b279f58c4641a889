package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestSnooze(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, time.Millisecond, time.Hour, outbox.MaxSnoozeDelay} {
		err := fmt.Errorf("waiting: %w", outbox.Snooze(d))
		got, ok := outbox.SnoozeDelay(err)
		require.True(t, ok, d)
		require.Equal(t, d, got)
	}
	for _, d := range []time.Duration{-time.Nanosecond, outbox.MaxSnoozeDelay + 1} {
		err := outbox.Snooze(d)
		require.Error(t, err)
		_, ok := outbox.SnoozeDelay(err)
		require.False(t, ok, "an invalid snooze is an ordinary error")
		require.Contains(t, err.Error(), "invalid snooze")
	}
	_, ok := outbox.SnoozeDelay(errors.New("x"))
	require.False(t, ok)
	_, ok = outbox.SnoozeDelay(nil)
	require.False(t, ok)
}

func TestJSONHandler(t *testing.T) {
	t.Parallel()
	type order struct {
		ID    string `json:"id"`
		Total int    `json:"total"`
	}
	var got order
	h := outbox.JSONHandler(func(_ context.Context, _ outbox.Event, v order) error {
		got = v
		return nil
	})
	ctx := context.Background()
	require.NoError(t, h(ctx, outbox.Event{Payload: []byte(`{"id":"o-1","total":42}`)}))
	require.Equal(t, order{ID: "o-1", Total: 42}, got)

	for name, payload := range map[string]string{
		"not JSON":   `secret-token-x`,
		"wrong type": `{"id":"o-1","total":"secret-token-x"}`,
		"number":     `{"id":12345678}`,
		"empty":      ``,
	} {
		err := h(ctx, outbox.Event{Payload: []byte(payload)})
		require.Error(t, err, name)
		require.True(t, outbox.IsPermanent(err), name)
		require.NotContains(t, err.Error(), "secret", name)
		require.NotContains(t, err.Error(), "12345678", name)
		require.Contains(t, err.Error(), "outbox_test.order", name)
	}

	boom := errors.New("boom")
	h = outbox.JSONHandler(func(context.Context, outbox.Event, order) error { return boom })
	err := h(ctx, outbox.Event{Payload: []byte(`{}`)})
	require.ErrorIs(t, err, boom)
	require.False(t, outbox.IsPermanent(err))
}
