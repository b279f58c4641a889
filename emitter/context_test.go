package emitter_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// TestEmitContextDone pins what docs/emitting.md promises about the
// context: one that is done before Emit sends anything leaves the
// transaction as it was, like invalid input; one that ends while the
// statement runs aborts the transaction, so that Commit fails and never
// persists the business rows without their events.
func TestEmitContextDone(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{NotifyEveryEmit: true})

	for name, n := range map[string]int{"Insert": 1, "Copy": 5000} {
		t.Run("Before"+name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			typ := "before." + name
			events := make([]outbox.Event, n)
			for i := range events {
				events[i] = validEvent()
				events[i].Type = typ
			}
			tx := b.begin(t)

			ids, err := b.emitter.Emit(ctx, tx, events...)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, outbox.ErrInvalidEvent)
			require.ErrorContains(t, err, "nothing was sent")
			require.Nil(t, ids)

			// The transaction is usable: the caller may emit again with
			// a live context and commit both.
			insertBusiness(t, tx, "before-"+name)
			_, err = b.emitter.Emit(context.Background(), tx, events[0])
			require.NoError(t, err)
			require.NoError(t, tx.Commit(context.Background()))
			require.Equal(t, 1, b.businessCount(t, "before-"+name))
			require.Equal(t, 1, b.outboxCount(t, "event_type = $1", typ))
		})
	}

	t.Run("During", func(t *testing.T) {
		t.Parallel()
		bg := context.Background()
		// Another transaction holds an uncommitted row with the ID, so the
		// insert waits on it until the context ends.
		id := uuid.Must(uuid.NewV7())
		holder := b.begin(t)
		held := validEvent()
		held.ID = id
		_, err := b.emitter.Emit(bg, holder, held)
		require.NoError(t, err)

		tx := b.begin(t)
		insertBusiness(t, tx, "during")
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		defer cancel()
		ev := validEvent()
		ev.ID = id
		_, err = b.emitter.Emit(ctx, tx, ev)
		require.Error(t, err)
		require.NotErrorIs(t, err, outbox.ErrInvalidEvent)

		require.Error(t, tx.Commit(bg), "a transaction whose Emit was cancelled mid-statement committed")
		require.Zero(t, b.businessCount(t, "during"))
		require.NoError(t, holder.Rollback(bg))
	})
}

// cancelAfterCopy is a pgx tracer that cancels the Emit's ctx as soon as
// its COPY has finished: the ctx ends between the COPY and the notify.
type cancelAfterCopy struct{ cancel context.CancelFunc }

func (c *cancelAfterCopy) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *cancelAfterCopy) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *cancelAfterCopy) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return ctx
}
func (c *cancelAfterCopy) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {
	if c.cancel != nil {
		c.cancel()
	}
}

// A ctx that ends after a COPY went through but before its notify does not
// make Emit report a failure for events that Commit then persists: the
// notify is still sent and Emit succeeds.
func TestEmitCopyThenContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{NotifyEveryEmit: true})
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = b.db.Schema
	tr := &cancelAfterCopy{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	events := make([]outbox.Event, 5000)
	for i := range events {
		events[i] = validEvent()
		events[i].Type = "copy.cancel"
	}
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.cancel = cancel
	ids, err := b.emitter.Emit(ctx, tx, events...)
	tr.cancel = nil
	require.NoError(t, err, "the events are in the transaction")
	require.Len(t, ids, len(events))
	require.NoError(t, tx.Commit(context.Background()))
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_events WHERE event_type = 'copy.cancel'`).Scan(&n))
	require.Equal(t, len(events), n)
}
