package emitter_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
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
	b := setup(t, emitter.Config{NotifyInterval: -1})

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
