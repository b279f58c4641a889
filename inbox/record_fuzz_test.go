package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// FuzzRecord checks what Record does with a decoded event and a consumer
// name, against a real inbox table: a name that is empty, longer than
// MaxConsumerLen, not UTF-8 or holding NUL gets an *outbox.InputError
// naming "consumer"; any other is stored byte for byte. Recording the same
// ID again reports a duplicate exactly when type and payload are equal,
// and otherwise a *ConflictError (so no type/payload split collides with
// another); no error quotes the payload. Each input runs in a transaction
// that is rolled back.
func FuzzRecord(f *testing.F) {
	for _, s := range []struct {
		consumer string
		typ1     string
		p1       []byte
		typ2     string
		p2       []byte
	}{
		{"billing", "order.created", []byte(`{"id":1}`), "order.created", []byte(`{"id":1}`)},
		{"billing", "order.created", []byte(`{"id":1}`), "order.created", []byte(`{"id":2}`)},
		{"billing", "ab", []byte("c"), "a", []byte("bc")},
		{"billing", "", []byte("SECRET-PAYLOAD-1"), "", []byte("SECRET-PAYLOAD-2")},
		{"billing", "t", nil, "t", []byte{}},
		{"", "t", []byte("p"), "t", []byte("p")},
		{"a\x00b", "t", []byte("p"), "t", []byte("p")},
		{"a\xffb", "t", []byte("p"), "t", []byte("p")},
		{"Billing ", "t\x00", []byte("\x00"), "t\x00", []byte("\x00")},
		{"é✓", "t", []byte("p"), "T", []byte("p")},
		{strings.Repeat("c", inbox.MaxConsumerLen), "t", []byte("p"), "t", []byte("p")},
		{strings.Repeat("c", inbox.MaxConsumerLen+1), "t", []byte("p"), "t", []byte("p")},
	} {
		f.Add(s.consumer, s.typ1, s.p1, s.typ2, s.p2)
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, consumer, typ1 string, p1 []byte, typ2 string, p2 []byte) {
		ctx := context.Background()
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		first := outbox.Event{ID: uuid.New(), Type: typ1, Payload: p1}
		res, err := b.ib.Record(ctx, tx, consumer, first)
		if len(consumer) == 0 || len(consumer) > inbox.MaxConsumerLen || !utf8.ValidString(consumer) || strings.Contains(consumer, "\x00") {
			var ierr *outbox.InputError
			require.True(t, errors.As(err, &ierr), "%T %v", err, err)
			require.Equal(t, "consumer", ierr.Field)
			requireNoPayload(ctx, t, b.ib, tx, consumer, first, err)
			return
		}
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		var stored string
		require.NoError(t, tx.QueryRow(ctx, "SELECT consumer FROM outbox_inbox WHERE event_id = $1", first.ID).Scan(&stored))
		require.Equal(t, consumer, stored)

		second := outbox.Event{ID: first.ID, Type: typ2, Payload: p2}
		res, err = b.ib.Record(ctx, tx, consumer, second)
		if typ1 == typ2 && bytes.Equal(p1, p2) {
			require.NoError(t, err)
			require.True(t, res.Duplicate)
			return
		}
		var conflict *inbox.ConflictError
		require.True(t, errors.As(err, &conflict), "%T %v", err, err)
		require.ErrorIs(t, err, inbox.ErrContentMismatch)
		requireNoPayload(ctx, t, b.ib, tx, consumer, second, err)
	})
}

// requireNoPayload checks that err, the error Record gave for e, does not
// depend on e's payload: Record with a random marker as payload (still a
// conflict, or still a bad consumer) gives the same text, which does not
// contain the marker. A substring check on the fuzzed payload alone would
// fail whenever the fuzzer makes the payload a piece of the consumer name
// the message quotes.
func requireNoPayload(ctx context.Context, t *testing.T, ib *inbox.Inbox, tx pgx.Tx, consumer string, e outbox.Event, err error) {
	t.Helper()
	marker := "SECRET-" + uuid.NewString()
	e.Payload = []byte(marker)
	_, again := ib.Record(ctx, tx, consumer, e)
	require.Error(t, again)
	require.Equal(t, err.Error(), again.Error())
	require.NotContains(t, again.Error(), marker)
}
