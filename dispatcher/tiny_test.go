package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// When handlers have been tiny, a batch runs on a few workers that take
// its events one after another. A handler that turns out slow must not
// hold up the events behind it: more workers join while events wait, so
// the rest of its batch is delivered while it still runs.
func TestTinyHandlersDoNotQueueBehindASlowOne(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	cfg := baseConfig(db)
	cfg.BatchSize, cfg.Concurrency = 100, 100
	d, err := dispatcher.New(db.NewPool(t, 4), cfg)
	require.NoError(t, err)
	release := make(chan struct{})
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	require.NoError(t, d.Handle("slow", func(context.Context, outbox.Event) error {
		<-release
		return nil
	}))
	runDispatcher(t, d)
	t.Cleanup(func() { close(release) })

	insertEvents(t, db, "x", 200)
	waitFor(t, "the warm-up events SENT", func() bool { return d.Stats().Sent == 200 })
	// No-op handlers average a few µs, but under -race on a loaded machine
	// the average can pass 20µs for a moment: pin it.
	d.SetHandlerTime(time.Microsecond)
	require.True(t, d.HandlersTiny(), "no-op handlers count as tiny")

	slow := insertEvents(t, db, "slow", 1)[0] // first in the next claim
	insertEvents(t, db, "x", 99)
	waitFor(t, "the events behind the slow one SENT", func() bool { return d.Stats().Sent == 299 })
	require.Equal(t, outbox.StatusProcessing, readRow(t, db, slow).Status)
}
