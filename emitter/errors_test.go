package emitter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A caller-set ID that is already in the outbox gives outbox.ErrDuplicateID
// naming the ID, by INSERT and by COPY, with the database's error still in
// the chain; a unique violation of the caller's own constraint, raised
// inside Emit by a trigger, does not.
func TestEmitDuplicateID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, n := range []int{1, 5000} { // 5000 events go by COPY
		t.Run(map[int]string{1: "Insert", 5000: "Copy"}[n], func(t *testing.T) {
			t.Parallel()
			b := setup(t, emitter.Config{})
			ev := validEvent()
			ev.ID = uuid.New()
			tx := b.begin(t)
			_, err := b.emitter.Emit(ctx, tx, ev)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))

			events := make([]outbox.Event, n)
			for i := range events {
				events[i] = validEvent()
			}
			events[n-1].ID = ev.ID
			_, err = b.emitter.Emit(ctx, b.begin(t), events...)
			require.ErrorIs(t, err, outbox.ErrDuplicateID)
			require.NotErrorIs(t, err, outbox.ErrInvalidEvent)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Contains(t, err.Error(), ev.ID.String())
			require.NotContains(t, err.Error(), payloadMarker)
			require.Equal(t, 1, b.outboxCount(t, ""))
		})
	}
	t.Run("OwnConstraint", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{})
		_, err := b.db.Pool.Exec(ctx, `
			INSERT INTO business VALUES ('taken');
			CREATE FUNCTION copy_to_business() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN INSERT INTO business VALUES ('taken'); RETURN NEW; END $$;
			CREATE TRIGGER copy AFTER INSERT ON outbox_events FOR EACH ROW EXECUTE FUNCTION copy_to_business()`)
		require.NoError(t, err)
		_, err = b.emitter.Emit(ctx, b.begin(t), validEvent())
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23505", pgErr.Code)
		require.NotErrorIs(t, err, outbox.ErrDuplicateID)
		require.True(t, strings.HasPrefix(err.Error(), "pgoutbox: emit into "), err.Error())
	})
}

// Emit into a table that does not exist gives outbox.ErrMissingTable and
// says how to create it.
func TestEmitMissingTable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	e := newEmitter(t, db, emitter.Config{})
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = e.Emit(context.Background(), tx, validEvent())
	require.ErrorIs(t, err, outbox.ErrMissingTable)
	require.ErrorContains(t, err, db.Table().String())
	require.ErrorContains(t, err, "migrations.Migrate")
	require.ErrorContains(t, err, "outboxctl migrate -schema "+db.Schema+" -table outbox_events")
}
