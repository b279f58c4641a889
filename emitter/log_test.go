package emitter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The emit suite's core cases, for an outbox and for a log (Kind
// outbox.KindLog): the same fields stored the same way, by INSERT and by
// COPY; nothing after a rollback, of the transaction or of a savepoint;
// concurrent writers.
func TestEmitBothKinds(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, kind outbox.TableKind) {
		ctx := context.Background()
		b := setupKind(t, kind, emitter.Config{AllowEmptyPayload: true})

		t.Run("FieldsRoundTrip", func(t *testing.T) {
			t.Parallel()
			tx := b.begin(t)
			ids, err := b.emitter.Emit(ctx, tx, fullEvent(), outbox.Event{Type: "bare"})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, fullEvent(), b.readEvent(t, ids[0]))
			require.Equal(t, 1, b.outboxCount(t, `id = $1 AND aggregate_type IS NULL AND aggregate_id IS NULL
				AND partition_key IS NULL AND idempotency_key IS NULL AND content_type IS NULL
				AND payload IS NULL AND headers = '{}'::jsonb`, ids[1]))
		})

		t.Run("LargeBatchByCopy", func(t *testing.T) {
			t.Parallel()
			events := manyEvents(5000, 0)
			events[0] = outbox.Event{Type: "bare", Payload: []byte("x")}
			events[1] = fullEvent()
			tx := b.begin(t)
			ids, err := b.emitter.Emit(ctx, tx, events...)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, 5000, b.outboxCount(t, "id = ANY($1)", ids))
			require.Equal(t, fullEvent(), b.readEvent(t, ids[1]))
			require.Equal(t, 1, b.outboxCount(t, `id = $1 AND aggregate_type IS NULL AND content_type IS NULL
				AND headers = '{}'::jsonb`, ids[0]))
		})

		t.Run("RollbackPersistsNothing", func(t *testing.T) {
			t.Parallel()
			tx := b.begin(t)
			insertBusiness(t, tx, "rollback-"+kind.String())
			ids, err := b.emitter.Emit(ctx, tx, validEvent(), validEvent())
			require.NoError(t, err)
			require.NoError(t, tx.Rollback(ctx))
			require.Zero(t, b.businessCount(t, "rollback-"+kind.String()))
			require.Zero(t, b.outboxCount(t, "id = ANY($1)", ids))
		})

		t.Run("SavepointRollbackLeavesNoRow", func(t *testing.T) {
			t.Parallel()
			tx := b.begin(t)
			kept, err := b.emitter.Emit(ctx, tx, validEvent())
			require.NoError(t, err)
			sp, err := tx.Begin(ctx) // a savepoint
			require.NoError(t, err)
			undone, err := b.emitter.Emit(ctx, sp, validEvent(), validEvent())
			require.NoError(t, err)
			require.NoError(t, sp.Rollback(ctx))
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, 1, b.outboxCount(t, "id = ANY($1)", kept))
			require.Zero(t, b.outboxCount(t, "id = ANY($1)", undone))
		})

		t.Run("Concurrent", func(t *testing.T) {
			t.Parallel()
			pool := b.db.NewPool(t, 4)
			const writers, perCall = 8, 3
			var wg sync.WaitGroup
			idsCh := make(chan []uuid.UUID, writers)
			errs := make([]error, writers)
			for g := range writers {
				wg.Go(func() {
					errs[g] = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						return emitInto(ctx, b.emitter, tx, g, perCall, idsCh)
					})
				})
			}
			wg.Wait()
			close(idsCh)
			require.NoError(t, errors.Join(errs...))
			var all []uuid.UUID
			for ids := range idsCh {
				all = append(all, ids...)
			}
			require.Equal(t, writers*perCall, b.outboxCount(t, "id = ANY($1)", all))
		})
	})
}

// Into a log, each event gets its transaction's top-level xid (a
// savepoint's too), an increasing seq and created_at from the defaults.
func TestEmitLogDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupKind(t, outbox.KindLog, emitter.Config{})
	tx := b.begin(t)
	first, err := b.emitter.Emit(ctx, tx, validEvent(), validEvent())
	require.NoError(t, err)
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	second, err := b.emitter.Emit(ctx, sp, validEvent())
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	var xid string
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid))
	require.NoError(t, tx.Commit(ctx))

	ids := append(first, second...)
	require.Equal(t, []any{xid, xid, xid}, b.column(t, ids, "xid::text"))
	seqs := b.column(t, ids, "seq")
	require.Less(t, seqs[0].(int64), seqs[1].(int64))
	require.Less(t, seqs[1].(int64), seqs[2].(int64))
	require.Equal(t, 3, b.outboxCount(t, "id = ANY($1) AND created_at IS NOT NULL", ids))
}

// An event with a Delay is refused for a log, by INSERT or COPY size,
// before anything is written: the error names the event and matches
// ErrDelayOnLog and outbox.ErrInvalidEvent, and tx stays usable.
func TestEmitLogRefusesDelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupKind(t, outbox.KindLog, emitter.Config{})
	for _, n := range []int{1, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			events := manyEvents(n, time.Microsecond)
			tx := b.begin(t)
			ids, err := b.emitter.Emit(ctx, tx, events...)
			require.Nil(t, ids)
			require.ErrorIs(t, err, emitter.ErrDelayOnLog)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			var verr *outbox.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, []any{n - 1, "Delay"}, []any{verr.Index, verr.Field})
			require.NotContains(t, err.Error(), payloadMarker)

			events[n-1].Delay = 0
			ids, err = b.emitter.Emit(ctx, tx, events...)
			require.NoError(t, err, "tx is still usable")
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, n, b.outboxCount(t, "id = ANY($1)", ids))
		})
	}
}

// Emit into a log sends no pg_notify: a listener on the table's channel
// hears nothing but the end marker; the INSERT is the call's one
// statement, one round trip on a warm statement cache (two on a cold
// one), and a large batch goes by COPY.
func TestEmitLogRoundTripsAndNoNotify(t *testing.T) {
	t.Parallel()
	b := setupKind(t, outbox.KindLog, emitter.Config{})
	listener := b.listen(t)
	b.emitAndEnd(t, true, 2, validEvent())
	require.Zero(t, b.countNotifications(t, listener))

	conn, counter := b.countingConnect(t)
	events := manyEvents(100, 0)
	trips, copies := emitCounting(t, b.emitter, conn, counter, events)
	require.Equal(t, []int{2, 0}, []int{trips, copies})
	trips, copies = emitCounting(t, b.emitter, conn, counter, events)
	require.Equal(t, []int{1, 0}, []int{trips, copies})
	_, copies = emitCounting(t, b.emitter, conn, counter, manyEvents(5000, 0))
	require.Equal(t, 1, copies)
}

// A log with no part for the transaction's xid refuses the row, by INSERT
// and by COPY; the error says what to do.
func TestEmitLogWithoutPart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupKind(t, outbox.KindLog, emitter.Config{})
	log := pgx.Identifier{b.db.Schema, outbox.DefaultTable}.Sanitize()
	rows, err := b.db.Pool.Query(ctx, `SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = $1::regclass`, log)
	require.NoError(t, err)
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, p := range parts {
		_, err := b.db.Pool.Exec(ctx, "ALTER TABLE "+log+" DETACH PARTITION "+p)
		require.NoError(t, err)
	}
	for _, n := range []int{1, 5000} {
		tx := b.begin(t)
		_, err := b.emitter.Emit(ctx, tx, manyEvents(n, 0)...)
		require.ErrorContains(t, err, "no part for this transaction's id", "%d events", n)
		require.ErrorContains(t, err, "outbox_events_part_add(xid8)")
	}
}
