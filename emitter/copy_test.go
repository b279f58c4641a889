package emitter_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A batch large enough for COPY, with delays, stores every column as the
// INSERT does: the full event field for field, NULL for empty optional
// strings and an empty payload, '{}' for no headers, and each event due at
// the transaction's now() plus its delay.
func TestEmitCopyRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{AllowEmptyPayload: true})
	events := manyEvents(5000, 0)
	events[1] = fullEvent()
	events[1].Delay = 90 * time.Minute
	events[2] = outbox.Event{Type: "bare"}
	ctx := context.Background()
	tx := b.begin(t)
	ids, err := b.emitter.Emit(ctx, tx, events...)
	require.NoError(t, err)

	var delayed, bare, atNow int
	require.NoError(t, tx.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE id = $1 AND next_attempt_at = now() + interval '90 minutes'),
		count(*) FILTER (WHERE id = $2 AND next_attempt_at = now() AND aggregate_type IS NULL
			AND aggregate_id IS NULL AND partition_key IS NULL AND idempotency_key IS NULL
			AND content_type IS NULL AND payload IS NULL AND headers = '{}'::jsonb),
		count(*) FILTER (WHERE next_attempt_at = now())
		FROM outbox_events`, ids[1], ids[2]).Scan(&delayed, &bare, &atNow))
	require.Equal(t, []int{1, 1, len(events) - 1}, []int{delayed, bare, atNow})
	require.NoError(t, tx.Commit(ctx))
	full := fullEvent()
	full.Delay = 0 // not read back
	require.Equal(t, full, b.readEvent(t, ids[1]))
}

// Delays of every kind in one COPY batch each land at now() + delay.
func TestEmitCopyMixedDelays(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{})
	delays := []time.Duration{0, time.Second, time.Hour, 1500 * time.Microsecond}
	events := manyEvents(6000, 0)
	for i := range events {
		events[i].Delay = delays[i%len(delays)]
	}
	ctx := context.Background()
	tx := b.begin(t)
	_, err := b.emitter.Emit(ctx, tx, events...)
	require.NoError(t, err)
	for _, d := range delays {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM outbox_events
			WHERE next_attempt_at = now() + $1 * interval '1 microsecond'`, d.Microseconds()).Scan(&n))
		require.Equal(t, len(events)/len(delays), n, "delay %v", d)
	}
}

// An invalid last event of 100,000 is reported with its index before
// anything is written, and the transaction stays usable.
func TestEmitRejectsLastOfManyEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{})
	events := manyEvents(100_000, time.Minute)
	events[len(events)-1].Type = ""
	tx := b.begin(t)
	ids, err := b.emitter.Emit(context.Background(), tx, events...)
	var verr *outbox.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, []any{len(events) - 1, "Type"}, []any{verr.Index, verr.Field})
	require.Nil(t, ids)
	insertBusiness(t, tx, "after-reject")
	require.NoError(t, tx.Commit(context.Background()))
	require.Zero(t, b.outboxCount(t, ""))
	require.Equal(t, 1, b.businessCount(t, "after-reject"))
}

// A ctx cancelled while the COPY streams fails the Emit, and nothing of
// the batch is left after the rollback. The connection cancels the ctx
// once 1 MiB of the COPY's 10 MB is written.
func TestEmitCopyCancelledMidStream(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var written atomic.Int64
	cfg, err := pgx.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = b.db.Schema
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		return &cancellingConn{Conn: conn, written: &written, after: 1 << 20, cancel: cancel}, err
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()

	tx, err := conn.Begin(context.Background())
	require.NoError(t, err)
	written.Store(0) // count the Emit only
	events := manyEvents(100_000, time.Minute)
	_, err = b.emitter.Emit(ctx, tx, events...)
	require.Error(t, err)
	require.NotErrorIs(t, err, outbox.ErrInvalidEvent)
	require.NotContains(t, err.Error(), payloadMarker)
	require.Greater(t, written.Load(), int64(1<<20), "the COPY had started")
	_ = tx.Rollback(context.Background())
	require.Zero(t, b.outboxCount(t, ""))
}

// cancellingConn calls cancel once more than after bytes were written
// through it (counted in written, which the test may reset).
type cancellingConn struct {
	net.Conn
	written *atomic.Int64
	after   int64
	cancel  context.CancelFunc
}

func (c *cancellingConn) Write(p []byte) (int, error) {
	if c.written.Add(int64(len(p))) > c.after {
		c.cancel()
	}
	return c.Conn.Write(p)
}
