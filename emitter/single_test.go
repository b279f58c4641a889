package emitter_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// singleVsMultiEvents are events whose rows the one-event VALUES statement
// and the multi-event unnest must store alike: every field set, only the
// type, an empty non-nil payload, headers needing escapes, a caller-set
// ID, a traceparent of the caller's own; and for an outbox delayed ones.
func singleVsMultiEvents(kind outbox.TableKind) []outbox.Event {
	own := validEvent()
	own.Headers = map[string]string{emitter.HeaderTraceparent: "00-11111111111111111111111111111111-2222222222222222-01"}
	withID := validEvent()
	withID.ID = uuid.New()
	events := []outbox.Event{fullEvent(), {Type: "bare"}, {Type: "empty", Payload: []byte{}}, own, withID}
	if kind == outbox.KindOutbox {
		delayed := fullEvent()
		delayed.Delay = 90*time.Minute + 1500*time.Microsecond
		events = append(events, delayed)
	}
	return events
}

// Each event emitted alone (the VALUES row) and the same events in one
// call (the unnest) give identical rows, every column compared but the ID
// (and a log's seq): emitted in one transaction, the due times, creation
// times and a log's xid agree too. The ctx carries a span, so the trace
// headers are added on both paths.
func TestEmitSingleMatchesMulti(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, kind outbox.TableKind) {
		b := setupKind(t, kind, emitter.Config{AllowEmptyPayload: true})
		ctx, sc := spanContext(t)
		events := singleVsMultiEvents(kind)
		tx := b.begin(t)
		var single []uuid.UUID
		for _, ev := range events {
			ev.ID = uuid.Nil // the multi call keeps the caller's
			ids, err := b.emitter.Emit(ctx, tx, ev)
			require.NoError(t, err)
			single = append(single, ids...)
		}
		multi, err := b.emitter.Emit(ctx, tx, events...)
		require.NoError(t, err)
		require.Len(t, multi, len(events))
		got := func(ids []uuid.UUID) []string { return rowsWithoutIDs(t, tx, ids) }
		require.Equal(t, got(multi), got(single))
		require.NoError(t, tx.Commit(ctx))
		want := fullEvent()
		want.Headers[emitter.HeaderTraceparent] = "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
		want.Headers[emitter.HeaderTracestate] = "vendor=abc"
		require.Equal(t, want, b.readEvent(t, single[0]))
		require.Equal(t, 1, b.outboxCount(t, `id = $1 AND aggregate_type IS NULL AND aggregate_id IS NULL
			AND partition_key IS NULL AND idempotency_key IS NULL AND content_type IS NULL
			AND payload IS NULL AND headers ? 'traceparent'`, single[1]))
	})
}

// rowsWithoutIDs returns the rows of ids as JSON, in the order of ids,
// without the id and seq columns.
func rowsWithoutIDs(t *testing.T, tx pgx.Tx, ids []uuid.UUID) []string {
	t.Helper()
	rows, err := tx.Query(context.Background(), `SELECT (to_jsonb(o) - 'id' - 'seq')::text
		FROM unnest($1::uuid[]) WITH ORDINALITY AS w(id, n) JOIN outbox_events AS o USING (id) ORDER BY n`, ids)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, out, len(ids))
	return out
}

// A single event with a caller-set ID already in the outbox gives the
// duplicate-ID error naming it, as a multi-event call does (a log does not
// check IDs), and a missing table the missing-table error, for both kinds.
func TestEmitSingleErrors(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, kind outbox.TableKind) {
		ctx := context.Background()
		b := setupKind(t, kind, emitter.Config{})
		ev := validEvent()
		ev.ID = uuid.New()
		tx := b.begin(t)
		_, err := b.emitter.Emit(ctx, tx, ev)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		if kind == outbox.KindOutbox {
			tx = b.begin(t)
			_, err = b.emitter.Emit(ctx, tx, ev)
			require.ErrorIs(t, err, outbox.ErrDuplicateID)
			require.Contains(t, err.Error(), ev.ID.String())
			require.NotContains(t, err.Error(), payloadMarker)
		}

		missing, err := emitter.New(emitter.Config{Kind: kind,
			Table: outbox.Table{Schema: b.db.Schema, Name: "no_such_table"}})
		require.NoError(t, err)
		tx = b.begin(t)
		_, err = missing.Emit(ctx, tx, validEvent())
		require.ErrorIs(t, err, outbox.ErrMissingTable)
	})
}
