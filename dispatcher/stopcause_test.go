package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The stop logs say why dispatching ended: the end of the context given
// to Start, with its cause (a short-lived context passed by mistake), or
// a call of Stop.
func TestStopLogsItsCause(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	start := func(ctx context.Context) (*dispatcher.Dispatcher, *logRecorder) {
		logs := &logRecorder{}
		cfg := baseConfig(db)
		cfg.Logger = slog.New(logs)
		d, err := dispatcher.New(db.NewPool(t, 4), cfg)
		require.NoError(t, err)
		require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
		require.NoError(t, d.Start(ctx))
		return d, logs
	}

	ctx, cancel := context.WithCancelCause(t.Context())
	d, logs := start(ctx)
	cancel(errors.New("the request is over"))
	<-d.Done()
	cause := "the context given to Start or Run ended: the request is over"
	require.Equal(t, 2, logs.count(slog.LevelInfo, "cause", cause), "the stopping and the stopped lines")

	d, logs = start(t.Context())
	require.NoError(t, d.Stop(t.Context()))
	require.Equal(t, 2, logs.count(slog.LevelInfo, "cause", "Stop was called"))
}
