package emitter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
)

func TestEmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, emitter.Config{AllowEmptyPayload: true})

	t.Run("CallerSetIDIsKept", func(t *testing.T) {
		t.Parallel()
		id := uuid.New()
		ev := validEvent()
		ev.ID = id
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, validEvent(), ev)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Len(t, ids, 2)
		require.Equal(t, id, ids[1])
		require.Equal(t, uuid.Version(7), ids[0].Version(), "generated IDs are UUIDv7")
		require.Equal(t, 1, b.outboxCount(t, "id = $1", id))
	})

	t.Run("CommitPersistsBusinessRowAndEvents", func(t *testing.T) {
		t.Parallel()
		tx := b.begin(t)
		insertBusiness(t, tx, "commit")
		ids, err := b.emitter.Emit(ctx, tx, validEvent(), validEvent(), validEvent())
		require.NoError(t, err)
		require.Len(t, ids, 3)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, b.businessCount(t, "commit"))
		require.Equal(t, 3, b.outboxCount(t, "id = ANY($1) AND status = 'PENDING' AND attempts = 0", ids))
	})

	t.Run("DelayUsesDatabaseClock", func(t *testing.T) {
		t.Parallel()
		const delay = time.Hour + 1500*time.Microsecond
		delayed, now := validEvent(), validEvent()
		delayed.Delay = delay
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, delayed, now)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		// created_at defaults to the transaction's now(), so the gap is the
		// delay exactly when next_attempt_at is now() + delay in SQL.
		gaps := b.column(t, ids, "(extract(epoch FROM next_attempt_at - created_at) * 1000000)::bigint")
		require.Equal(t, []any{delay.Microseconds(), int64(0)}, gaps)
	})

	t.Run("EmptyOptionalStringsAreNull", func(t *testing.T) {
		t.Parallel()
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, outbox.Event{Type: "bare", Payload: []byte("x")})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, b.outboxCount(t, `id = $1 AND aggregate_type IS NULL AND aggregate_id IS NULL
			AND partition_key IS NULL AND idempotency_key IS NULL AND content_type IS NULL
			AND headers = '{}'::jsonb`, ids[0]))
	})

	t.Run("EmptyPayloadWhenAllowed", func(t *testing.T) {
		t.Parallel()
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx,
			outbox.Event{Type: "nil.payload", ContentType: outbox.ContentTypeJSON},
			outbox.Event{Type: "empty.payload", Payload: []byte{}})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 2, b.outboxCount(t, "id = ANY($1) AND coalesce(length(payload), 0) = 0", ids))
	})

	t.Run("FieldsRoundTrip", func(t *testing.T) {
		t.Parallel()
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, fullEvent())
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, fullEvent(), b.readEvent(t, ids[0]))
	})

	t.Run("HeaderRuleEdgesRoundTrip", func(t *testing.T) {
		t.Parallel()
		// What the header rule accepts, every publisher carries byte for
		// byte (the conformance suite checks that half): Emit takes it and
		// stores it as it is.
		var events []outbox.Event
		for _, c := range outboxtest.HeaderCases() {
			if c.Field == "" {
				events = append(events, c.Event)
			}
		}
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, events...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		for i, want := range events {
			got := b.readEvent(t, ids[i])
			got.ID, got.Attempt, got.CreatedAt = want.ID, want.Attempt, want.CreatedAt
			require.Empty(t, outboxtest.EventDiff(want, got))
		}
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
		require.Equal(t, 5000, b.outboxCount(t, "id = ANY($1) AND next_attempt_at = created_at", ids))
		require.Equal(t, fullEvent(), b.readEvent(t, ids[1]))
		require.Equal(t, 1, b.outboxCount(t, `id = $1 AND aggregate_type IS NULL AND aggregate_id IS NULL
			AND partition_key IS NULL AND idempotency_key IS NULL AND content_type IS NULL
			AND headers = '{}'::jsonb`, ids[0]))
	})

	t.Run("NoEventsIsANoOp", func(t *testing.T) {
		t.Parallel()
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx)
		require.NoError(t, err)
		require.Nil(t, ids)
		require.NoError(t, tx.Commit(ctx))
	})

	t.Run("RollbackPersistsNothing", func(t *testing.T) {
		t.Parallel()
		tx := b.begin(t)
		insertBusiness(t, tx, "rollback")
		ids, err := b.emitter.Emit(ctx, tx, validEvent(), validEvent())
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, 0, b.businessCount(t, "rollback"))
		require.Equal(t, 0, b.outboxCount(t, "id = ANY($1)", ids))
	})
}

// fullEvent returns an event with every field set, and text that needs
// escaping in headers.
func fullEvent() outbox.Event {
	return outbox.Event{
		Type:           "order.shipped",
		AggregateType:  "order",
		AggregateID:    "order-7",
		PartitionKey:   "customer-3",
		IdempotencyKey: "ship-7",
		ContentType:    "application/cloudevents+json; charset=utf-8",
		// An escaped backslash before u0000 is not the \u0000 escape.
		Payload: []byte(`{"path":"C:\\u0000dir","emoji":"✓"}`),
		Headers: map[string]string{"trace": "a\"b\\c\td", "x-amp": "<&> ü", "empty": ""},
	}
}

// readEvent reads back the emitted fields of one event.
func (b *testBundle) readEvent(t *testing.T, id uuid.UUID) outbox.Event {
	t.Helper()
	var got outbox.Event
	var headers []byte
	err := b.db.Pool.QueryRow(context.Background(), `SELECT event_type, coalesce(aggregate_type, ''),
		coalesce(aggregate_id, ''), coalesce(partition_key, ''), coalesce(idempotency_key, ''),
		coalesce(content_type, ''), payload, headers FROM outbox_events WHERE id = $1`, id).
		Scan(&got.Type, &got.AggregateType, &got.AggregateID, &got.PartitionKey,
			&got.IdempotencyKey, &got.ContentType, &got.Payload, &headers)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(headers, &got.Headers))
	return got
}

// column returns one SQL expression over the rows of ids, in the order of ids.
func (b *testBundle) column(t *testing.T, ids []uuid.UUID, expr string) []any {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT `+expr+`
		FROM unnest($1::uuid[]) WITH ORDINALITY AS w(id, n) JOIN outbox_events USING (id) ORDER BY n`, ids)
	require.NoError(t, err)
	vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (any, error) {
		var v any
		err := r.Scan(&v)
		return v, err
	})
	require.NoError(t, err)
	return vals
}

func TestEmitConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, emitter.Config{})
	pool := b.db.NewPool(t, 10)

	const goroutines, perCall = 50, 3
	var wg sync.WaitGroup
	idsCh := make(chan []uuid.UUID, goroutines)
	errCh := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			errCh <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return emitInto(ctx, b.emitter, tx, g, perCall, idsCh)
			})
		})
	}
	wg.Wait()
	close(idsCh)
	close(errCh)
	for err := range errCh {
		require.NoError(t, err)
	}
	seen := map[uuid.UUID]bool{}
	for ids := range idsCh {
		for _, id := range ids {
			require.False(t, seen[id], "duplicate id %s", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, goroutines*perCall)
	require.Equal(t, goroutines*perCall, b.outboxCount(t, ""))
}

// emitInto emits n events for goroutine g in tx and reports their IDs.
func emitInto(ctx context.Context, e *emitter.Emitter, tx pgx.Tx, g, n int, out chan<- []uuid.UUID) error {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = validEvent()
		events[i].AggregateID = fmt.Sprintf("g%d-%d", g, i)
	}
	ids, err := e.Emit(ctx, tx, events...)
	if err == nil {
		out <- ids
	}
	return err
}
