package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ConflictDifferentPayload", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		e := newEvent(`{"secret":"first"}`)
		_, err := b.process(t, "billing", e, &calls)
		require.NoError(t, err)

		other := e
		other.Payload = []byte(`{"secret":"second"}`)
		res, err := b.process(t, "billing", other, &calls)

		var conflict *inbox.ConflictError
		require.ErrorAs(t, err, &conflict)
		require.ErrorIs(t, err, inbox.ErrContentMismatch)
		require.Equal(t, inbox.ConflictError{Consumer: "billing", EventID: e.ID}, *conflict)
		require.NotContains(t, err.Error(), "secret")
		require.Equal(t, inbox.Result{}, res)
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, 1, b.effects(t, "billing", e.ID))
	})

	t.Run("ConflictDifferentType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		e := newEvent(`{}`)
		_, err := b.process(t, "billing", e, &calls)
		require.NoError(t, err)

		other := e
		other.Type = "order.cancelled"
		_, err = b.process(t, "billing", other, &calls)

		require.ErrorIs(t, err, inbox.ErrContentMismatch)
		require.Equal(t, int64(1), calls.Load())
	})

	t.Run("DuplicateSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		e := newEvent(`{"n":1}`)
		first, err := b.process(t, "billing", e, &calls)
		require.NoError(t, err)

		// A redelivery carries other headers and attempt numbers; only the
		// type and payload count as content.
		again := e
		again.Headers = map[string]string{"traceparent": "00-x"}
		again.Attempt = 2
		res, err := b.process(t, "billing", again, &calls)

		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.True(t, res.ProcessedAt.Equal(first.ProcessedAt))
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, 1, b.effects(t, "billing", e.ID))
		require.Equal(t, 1, b.records(t))
	})

	t.Run("FirstTimeRunsWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		e := newEvent(`{"n":1}`)

		res, err := b.process(t, "billing", e, &calls)

		require.NoError(t, err)
		require.False(t, res.Duplicate)
		require.False(t, res.ProcessedAt.IsZero())
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, 1, b.effects(t, "billing", e.ID))
		require.Equal(t, 1, b.count(t, "SELECT count(*) FROM outbox_inbox WHERE consumer = 'billing' AND event_id = $1 AND octet_length(payload_hash) = 32", e.ID))
	})

	t.Run("RecordWithoutWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := newEvent(`{}`)
		for _, wantDuplicate := range []bool{false, true} {
			tx, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			res, err := b.ib.Record(ctx, tx, "billing", e)
			require.NoError(t, err)
			require.Equal(t, wantDuplicate, res.Duplicate)
			require.NoError(t, tx.Commit(ctx))
		}
		require.Equal(t, 1, b.records(t))
	})

	t.Run("RollbackUndoesRecordAndWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		e := newEvent(`{}`)
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		res, err := b.ib.Process(ctx, tx, "billing", e, effect("billing", e.ID, &calls))
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, b.records(t))
		require.Zero(t, b.effects(t, "billing", e.ID))

		// The redelivery is new again.
		res, err = b.process(t, "billing", e, &calls)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, 1, b.effects(t, "billing", e.ID))
	})

	t.Run("SeparateConsumers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		e := newEvent(`{}`)
		for _, consumer := range []string{"billing", "shipping", "billing", "shipping"} {
			_, err := b.process(t, consumer, e, &calls)
			require.NoError(t, err)
		}
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, 1, b.effects(t, "billing", e.ID))
		require.Equal(t, 1, b.effects(t, "shipping", e.ID))
		require.Equal(t, 2, b.records(t))
	})

	t.Run("TxFinished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		var calls atomic.Int64

		_, err = b.ib.Process(ctx, tx, "billing", newEvent(`{}`), effect("billing", uuid.New(), &calls))

		require.ErrorIs(t, err, outbox.ErrInvalidInput)
		require.ErrorIs(t, err, outbox.ErrTxDone)
		require.Zero(t, calls.Load())
	})

	t.Run("WorkErrorRemovesRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := newEvent(`{}`)
		boom := errors.New("boom")
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)

		_, err = b.ib.Process(ctx, tx, "billing", e, func(context.Context, pgx.Tx) error { return boom })

		require.ErrorIs(t, err, boom)
		// A caller that commits anyway leaves the event unprocessed.
		require.NoError(t, tx.Commit(ctx))
		require.Zero(t, b.records(t))
	})
}

func TestProcessInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	valid := newEvent(`{}`)
	tests := []struct {
		name     string
		arg      string
		consumer string
		event    outbox.Event
		nilTx    bool
		nilWork  bool
	}{
		{name: "ConsumerEmpty", arg: "consumer", event: valid},
		{name: "ConsumerInvalidUTF8", arg: "consumer", consumer: "bill\xffing", event: valid},
		{name: "ConsumerNUL", arg: "consumer", consumer: "bill\x00ing", event: valid},
		{name: "ConsumerTooLong", arg: "consumer", consumer: strings.Repeat("c", inbox.MaxConsumerLen+1), event: valid},
		{name: "EventIDZero", arg: "event.ID", consumer: "billing", event: outbox.Event{Type: "t", Payload: []byte("{}")}},
		{name: "TxNil", arg: "tx", consumer: "billing", event: valid, nilTx: true},
		{name: "WorkNil", arg: "work", consumer: "billing", event: valid, nilWork: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tx, err := b.db.Pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(ctx) })
			var calls atomic.Int64
			work := effect(tt.consumer, tt.event.ID, &calls)
			if tt.nilWork {
				work = nil
			}
			callTx := tx
			if tt.nilTx {
				callTx = nil
			}

			_, err = b.ib.Process(ctx, callTx, tt.consumer, tt.event, work)

			var inputErr *outbox.InputError
			require.ErrorAs(t, err, &inputErr)
			require.ErrorIs(t, err, outbox.ErrInvalidInput)
			require.Equal(t, tt.arg, inputErr.Field)
			require.Equal(t, tt.nilTx, errors.Is(err, outbox.ErrTxDone))
			require.Zero(t, calls.Load())
			// Nothing was written and the tx is still usable.
			var n int
			require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM outbox_inbox").Scan(&n))
			require.Zero(t, n)
		})
	}
}

func TestNewInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		table outbox.Table
	}{
		{"SchemaUppercase", outbox.Table{Schema: "Inbox"}},
		{"TableInjection", outbox.Table{Name: `x"; DROP SCHEMA public; --`}},
		{"TableTooLong", outbox.Table{Name: strings.Repeat("t", 49)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := inbox.New(inbox.Config{Table: tt.table})
			require.ErrorIs(t, err, outbox.ErrInvalidConfig)
			require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	ib, err := inbox.New(inbox.Config{})
	require.NoError(t, err)
	require.Equal(t, outbox.Table{Schema: "public", Name: inbox.DefaultTable}, ib.Table())
}

// Record into an inbox table that does not exist gives
// outbox.ErrMissingTable with the database's message and a hint; a table
// missing for a trigger on the inbox table does not (the inbox table
// exists), and its text names the trigger's table.
func TestRecordMissingTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	record := func(db *testdb.DB, cfg inbox.Config) error {
		ib, err := inbox.New(cfg)
		require.NoError(t, err)
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = ib.Record(ctx, tx, "c", newEvent(`{}`))
		return err
	}
	t.Run("Inbox", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		err := record(db, inbox.Config{Table: outbox.Table{Schema: db.Schema}})
		require.ErrorIs(t, err, outbox.ErrMissingTable)
		require.ErrorContains(t, err, "does not exist (SQLSTATE 42P01)")
		require.ErrorContains(t, err, "inbox.Migrate")
	})
	t.Run("Trigger", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `
			CREATE TABLE audit (x text);
			CREATE FUNCTION to_audit() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN INSERT INTO audit VALUES ('x'); RETURN NEW; END $$;
			CREATE TRIGGER audit AFTER INSERT ON outbox_inbox FOR EACH ROW EXECUTE FUNCTION to_audit();
			DROP TABLE audit`)
		require.NoError(t, err)
		err = record(b.db, b.cfg)
		require.Error(t, err)
		require.NotErrorIs(t, err, outbox.ErrMissingTable, "the inbox table exists: %v", err)
		require.ErrorContains(t, err, `relation "audit" does not exist`)
	})
}
