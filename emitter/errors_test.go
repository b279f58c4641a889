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

// Emit into a table that does not exist gives outbox.ErrMissingTable, keeps
// the database's message and says how to create it.
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
	require.ErrorContains(t, err, "does not exist (SQLSTATE 42P01)")
	require.ErrorContains(t, err, "migrations.Migrate")
	require.ErrorContains(t, err, "outboxctl migrate -schema "+db.Schema+" -table outbox_events")
}

// A table missing for a trigger on the outbox table (here one that writes
// to a dropped audit table) is not outbox.ErrMissingTable: the outbox
// table exists. The database's message, naming the missing table, stays
// in the text.
func TestEmitTriggerMissingTableIsNotErrMissingTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, emitter.Config{})
	_, err := b.db.Pool.Exec(ctx, `
		CREATE TABLE audit (x text);
		CREATE FUNCTION to_audit() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN INSERT INTO audit VALUES ('x'); RETURN NEW; END $$;
		CREATE TRIGGER audit AFTER INSERT ON outbox_events FOR EACH ROW EXECUTE FUNCTION to_audit();
		DROP TABLE audit`)
	require.NoError(t, err)
	_, err = b.emitter.Emit(ctx, b.begin(t), validEvent())
	require.Error(t, err)
	require.NotErrorIs(t, err, outbox.ErrMissingTable, "the outbox table exists: %v", err)
	require.ErrorContains(t, err, `relation "audit" does not exist`)
	require.True(t, strings.HasPrefix(err.Error(), "pgoutbox: emit into "), err.Error())
}

// A producer role with INSERT only (what migrations.RenderGrants gives)
// gets no key in the server's detail of a duplicate ID; the error still
// names the caller-set ID: the one the call set, or, when it set several,
// "one of" some of them.
func TestEmitDuplicateIDNamedForInsertOnlyRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, emitter.Config{})
	role := b.db.NewRole(t, "pgotest_producer")
	_, err := b.db.Pool.Exec(ctx, `GRANT USAGE ON SCHEMA `+b.db.Schema+` TO `+role+`; GRANT INSERT ON outbox_events TO `+role)
	require.NoError(t, err)
	producer := b.db.RolePool(t, role, 2)
	ev := validEvent()
	ev.ID = uuid.New()
	tx := b.begin(t)
	_, err = b.emitter.Emit(ctx, tx, ev)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	emitAsProducer := func(events ...outbox.Event) error {
		tx, err := producer.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = b.emitter.Emit(ctx, tx, events...)
		return err
	}

	err = emitAsProducer(validEvent(), ev, validEvent())
	require.ErrorIs(t, err, outbox.ErrDuplicateID)
	require.Contains(t, err.Error(), "event "+ev.ID.String()+":", "the one caller-set ID")
	require.NotContains(t, err.Error(), "not reported")

	others := []outbox.Event{validEvent(), validEvent(), validEvent(), validEvent()}
	for i := range others {
		others[i].ID = uuid.New()
	}
	err = emitAsProducer(append(others, ev)...)
	require.ErrorIs(t, err, outbox.ErrDuplicateID)
	require.Contains(t, err.Error(), "event one of "+others[0].ID.String()+", ")
	require.Contains(t, err.Error(), ", …:", "at most a few IDs")
	require.NotContains(t, err.Error(), others[3].ID.String())
}
