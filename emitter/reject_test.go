package emitter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
)

// Ways a test hands Emit its transaction.
const (
	txOpen       = iota // a fresh open transaction
	txNil               // a nil pgx.Tx
	txTypedNil          // a nil *pgxpool.Tx in a pgx.Tx
	txCommitted         // a transaction already committed
	txRolledBack        // a transaction already rolled back
)

// rejectCase is one bad input: the events (a valid event changed by edit,
// or the whole list from events), and the error it must give.
type rejectCase struct {
	name   string
	cfg    emitter.Config
	tx     int
	edit   func(*outbox.Event)
	events func() []outbox.Event
	index  int
	field  string
}

func editText(field string, value string) func(*outbox.Event) {
	return func(ev *outbox.Event) {
		switch field {
		case "Type":
			ev.Type = value
		case "AggregateType":
			ev.AggregateType = value
		case "AggregateID":
			ev.AggregateID = value
		case "PartitionKey":
			ev.PartitionKey = value
		case "IdempotencyKey":
			ev.IdempotencyKey = value
		case "ContentType":
			ev.ContentType = value
		case "HeaderName":
			ev.Headers = map[string]string{value: headerMarker}
		case "HeaderValue":
			ev.Headers = map[string]string{"h": headerMarker + value}
		default:
			panic("unknown field " + field)
		}
	}
}

func payload(contentType, body string) func(*outbox.Event) {
	return func(ev *outbox.Event) { ev.ContentType, ev.Payload = contentType, []byte(body) }
}

// textCases returns, for every text field, the non-UTF-8 and NUL cases.
func textCases() []rejectCase {
	fields := []string{"AggregateID", "AggregateType", "ContentType", "HeaderName", "HeaderValue",
		"IdempotencyKey", "PartitionKey", "Type"}
	var cases []rejectCase
	for _, f := range fields {
		want := f
		if strings.HasPrefix(f, "Header") {
			want = "Headers"
		}
		cases = append(cases,
			rejectCase{name: f + "HasNUL", edit: editText(f, "a\x00b"), field: want},
			rejectCase{name: f + "NotUTF8", edit: editText(f, "a\xffb"), field: want})
	}
	return cases
}

// headerRuleCases are values that no shipped publisher carries byte for
// byte: NATS refuses header names that are not tokens, trims spaces and
// tabs around values and turns CR and LF inside them into spaces. Every
// field that travels as a broker header follows the rule. The cases of
// outboxtest.HeaderCases that break it come on top.
func headerRuleCases() []rejectCase {
	cases := []rejectCase{
		{name: "AggregateTypeHasCR", edit: editText("AggregateType", "order\rline"), field: "AggregateType"},
		{name: "ContentTypeLeadingSpace", edit: editText("ContentType", " text/plain"), field: "ContentType"},
		{name: "HeaderValueTrailingSpace", edit: editText("HeaderValue", "  "), field: "Headers"},
		{name: "HeaderValueTrailingTab", edit: editText("HeaderValue", "\t"), field: "Headers"},
		{name: "PartitionKeyTrailingTab", edit: editText("PartitionKey", "key\t"), field: "PartitionKey"},
		{name: "TypeHasLF", edit: editText("Type", "order\ncreated"), field: "Type"},
	}
	for _, c := range outboxtest.HeaderCases() {
		if c.Field != "" {
			ev := c.Event
			cases = append(cases, rejectCase{name: "HeaderRule" + c.Name, field: c.Field,
				events: func() []outbox.Event { return []outbox.Event{ev} }})
		}
	}
	return cases
}

func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("h%d", i)] = headerMarker
	}
	return h
}

func rejectCases() []rejectCase {
	dup := uuid.New()
	badJSON := `{"note":"` + payloadMarker + `"`
	cases := []rejectCase{
		{name: "AggregateIDOverLong", edit: editText("AggregateID", strings.Repeat("a", 1025)), field: "AggregateID"},
		{name: "AggregateTypeOverLong", edit: editText("AggregateType", strings.Repeat("a", 256)), field: "AggregateType"},
		{name: "ContentTypeHasCRLF", edit: editText("ContentType", "text/plain\r\nX: y"), field: "ContentType"},
		{name: "DelayNegative", edit: func(ev *outbox.Event) { ev.Delay = -1 }, field: "Delay"},
		{name: "DuplicateIDs", index: 2, field: "ID", events: func() []outbox.Event {
			evs := []outbox.Event{validEvent(), validEvent(), validEvent()}
			evs[0].ID, evs[2].ID = dup, dup
			return evs
		}},
		{name: "HeaderNameEmpty", edit: editText("HeaderName", ""), field: "Headers"},
		{name: "HeaderNameHasCR", edit: editText("HeaderName", "a\rb"), field: "Headers"},
		{name: "HeaderNameHasLF", edit: editText("HeaderName", "a\nb"), field: "Headers"},
		{name: "HeaderNameReservedPrefix", edit: editText("HeaderName", "CE_id"), field: "Headers"},
		{name: "HeaderValueHasCR", edit: editText("HeaderValue", "\rX"), field: "Headers"},
		{name: "HeaderValueHasLF", edit: editText("HeaderValue", "\nX"), field: "Headers"},
		{name: "HeadersNotAllowed", cfg: emitter.Config{NoHeaders: true}, field: "Headers"},
		{name: "HeadersTooLarge", field: "Headers", edit: func(ev *outbox.Event) {
			ev.Headers = map[string]string{"big": headerMarker + strings.Repeat("x", emitter.DefaultMaxHeaderBytes)}
		}},
		{name: "HeadersTooMany", field: "Headers", edit: func(ev *outbox.Event) {
			ev.Headers = manyHeaders(emitter.DefaultMaxHeaders + 1)
		}},
		{name: "IdempotencyKeyOverLong", edit: editText("IdempotencyKey", strings.Repeat("a", 1025)), field: "IdempotencyKey"},
		{name: "JSONCloudEventsInvalid", edit: payload("application/cloudevents+json", badJSON), field: "Payload"},
		{name: "JSONHasNULEscape", edit: payload(outbox.ContentTypeJSON, `{"a":"x\u0000`+payloadMarker+`"}`), field: "Payload"},
		{name: "JSONInvalid", edit: payload(outbox.ContentTypeJSON, badJSON), field: "Payload"},
		{name: "JSONWithCharsetInvalid", edit: payload("Application/JSON; charset=utf-8", badJSON), field: "Payload"},
		{name: "PartitionKeyOverLong", edit: editText("PartitionKey", strings.Repeat("a", 1025)), field: "PartitionKey"},
		{name: "PayloadEmpty", edit: payload("", ""), field: "Payload"},
		{name: "PayloadNil", edit: func(ev *outbox.Event) { ev.Payload = nil }, field: "Payload"},
		{name: "PayloadOverConfiguredLimit", cfg: emitter.Config{MaxPayloadBytes: 16}, field: "Payload",
			edit: payload("text/plain", payloadMarker)},
		{name: "PayloadOverDefaultLimit", field: "Payload",
			edit: payload("", payloadMarker+strings.Repeat("x", emitter.DefaultMaxPayloadBytes))},
		{name: "SecondEventInvalid", index: 1, field: "Type", events: func() []outbox.Event {
			evs := []outbox.Event{validEvent(), validEvent()}
			evs[1].Type = ""
			return evs
		}},
		{name: "TxCommitted", tx: txCommitted, index: -1, field: "tx"},
		{name: "TxNil", tx: txNil, index: -1, field: "tx"},
		{name: "TxRolledBack", tx: txRolledBack, index: -1, field: "tx"},
		{name: "TxTypedNil", tx: txTypedNil, index: -1, field: "tx"},
		{name: "TypeEmpty", edit: editText("Type", ""), field: "Type"},
		{name: "TypeLeadingSpace", edit: editText("Type", " order.created"), field: "Type"},
		{name: "TypeOnlyWhiteSpace", edit: editText("Type", " \t\n"), field: "Type"},
		{name: "TypeOverLong", edit: editText("Type", strings.Repeat("t", 256)), field: "Type"},
		{name: "TypeTrailingSpace", edit: editText("Type", "order.created\u00a0"), field: "Type"},
	}
	cases = append(cases, textCases()...)
	cases = append(cases, headerRuleCases()...)
	slices.SortFunc(cases, func(a, b rejectCase) int { return strings.Compare(a.name, b.name) })
	return cases
}

// TestEmitRejectsBadInput checks every bad input: the typed error names the
// event and field, never quotes the payload or a header value, nothing is
// written, and an open transaction stays usable and commits.
func TestEmitRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, emitter.Config{})

	for _, tc := range rejectCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEmitter(t, b.db, tc.cfg)
			tx := b.txFor(t, tc.tx)

			ids, err := e.Emit(ctx, tx, tc.eventsToEmit()...)
			require.Error(t, err)
			require.Nil(t, ids)
			if tc.tx != txOpen {
				// A nil or finished transaction is a bad argument, not
				// a bad event.
				var ierr *outbox.InputError
				require.ErrorAs(t, err, &ierr)
				require.Equal(t, "tx", ierr.Field)
				require.ErrorIs(t, err, outbox.ErrTxDone)
				require.ErrorIs(t, err, outbox.ErrInvalidInput)
				require.NotErrorIs(t, err, outbox.ErrInvalidEvent)
			} else {
				var verr *outbox.ValidationError
				require.ErrorAs(t, err, &verr)
				require.Equal(t, tc.field, verr.Field)
				require.Equal(t, tc.index, verr.Index)
				require.ErrorIs(t, err, outbox.ErrInvalidEvent)
				require.NotErrorIs(t, err, outbox.ErrTxDone)
			}
			require.NotContains(t, err.Error(), payloadMarker)
			require.NotContains(t, err.Error(), headerMarker)

			if tc.tx == txOpen {
				insertBusiness(t, tx, tc.name)
				require.NoError(t, tx.Commit(ctx))
				require.Equal(t, 1, b.businessCount(t, tc.name))
			}
			require.Equal(t, 0, b.outboxCount(t, ""))
		})
	}
}

func (tc rejectCase) eventsToEmit() []outbox.Event {
	if tc.events != nil {
		return tc.events()
	}
	ev := validEvent()
	if tc.edit != nil {
		tc.edit(&ev)
	}
	return []outbox.Event{ev}
}

// txFor returns a transaction in the given state.
func (b *testBundle) txFor(t *testing.T, state int) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	switch state {
	case txNil:
		return nil
	case txTypedNil:
		var tx *pgxpool.Tx
		return tx
	}
	tx := b.begin(t)
	switch state {
	case txCommitted:
		require.NoError(t, tx.Commit(ctx))
	case txRolledBack:
		require.NoError(t, tx.Rollback(ctx))
	}
	return tx
}

func TestEmitAbortedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, emitter.Config{})
	tx := b.begin(t)
	_, err := tx.Exec(ctx, `SELECT 1/0`)
	require.Error(t, err)

	_, err = b.emitter.Emit(ctx, tx, validEvent())
	require.ErrorIs(t, err, outbox.ErrTxDone)
	require.NotErrorIs(t, err, outbox.ErrInvalidEvent)
	var ierr *outbox.InputError
	require.ErrorAs(t, err, &ierr)
	require.Equal(t, "tx", ierr.Field)
	require.Contains(t, err.Error(), "aborted by an earlier error")
	require.NotContains(t, err.Error(), "nil", "an aborted transaction is not described as nil")
	require.NotContains(t, err.Error(), "finished")
}
