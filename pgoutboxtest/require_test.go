package pgoutboxtest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/pgoutboxtest"
)

func TestRequireEmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FailsNamingEachFieldThatDiffers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		full := outbox.Event{
			Type: "order.placed", AggregateType: "order", AggregateID: "42", PartitionKey: "p",
			IdempotencyKey: "k", ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"h": "v"},
		}
		id := b.emit(t, full)[0].ID
		base := pgoutboxtest.Want{Type: "order.placed"}
		cases := []struct {
			name string
			edit func(w *pgoutboxtest.Want)
			says string
		}{
			{"AggregateID", func(w *pgoutboxtest.Want) { w.AggregateID = "43" }, `AggregateID "42", want "43"`},
			{"AggregateType", func(w *pgoutboxtest.Want) { w.AggregateType = "cart" }, `AggregateType "order", want "cart"`},
			{"ContentType", func(w *pgoutboxtest.Want) { w.ContentType = "text/plain" }, `ContentType "application/json", want "text/plain"`},
			{"HeaderMissing", func(w *pgoutboxtest.Want) { w.Headers = map[string]string{"x": ""} }, `header "x" missing, want ""`},
			{"HeaderValue", func(w *pgoutboxtest.Want) { w.Headers = map[string]string{"h": "w"} }, `header "h" is "v", want "w"`},
			{"ID", func(w *pgoutboxtest.Want) { w.ID = uuid.New() }, "ID " + id.String() + ", want "},
			{"IdempotencyKey", func(w *pgoutboxtest.Want) { w.IdempotencyKey = "other" }, `IdempotencyKey "k", want "other"`},
			{"PartitionKey", func(w *pgoutboxtest.Want) { w.PartitionKey = "q" }, `PartitionKey "p", want "q"`},
			{"Payload", func(w *pgoutboxtest.Want) { w.Payload = []byte(`{"n": 1}`) }, "Payload not equal to `{\"n\": 1}`"},
			{"PayloadJSON", func(w *pgoutboxtest.Want) { w.PayloadJSON = map[string]int{"n": 2} }, "Payload not JSON-equal to `{\"n\":2}`"},
			{"Status", func(w *pgoutboxtest.Want) { w.Status = outbox.StatusSent }, `Status "PENDING", want "SENT"`},
		}
		for _, c := range cases {
			w := base
			c.edit(&w)
			msg := requireFails(t, func(tb pgoutboxtest.TB) { pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, w) })
			require.Contains(t, msg, "RequireEmitted: no event in "+b.table.String()+" matches {Type \"order.placed\", ", c.name)
			require.Contains(t, msg, id.String(), c.name)
			require.Contains(t, msg, "differs: "+c.says, c.name)
		}
	})

	t.Run("FailsOnAnEmptyTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed"})
		})
		require.Contains(t, msg, `no event in `+b.table.String()+` matches {Type "order.placed"}`)
		require.Contains(t, msg, "the table is empty")
	})

	t.Run("FailsOnAnInvalidTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, outbox.Table{Name: "bad name"}, pgoutboxtest.Want{Type: "a"})
		})
		require.Contains(t, msg, `RequireEmitted: the outbox table is invalid: `)
		require.Contains(t, msg, `"bad name"`)
	})

	t.Run("FailsOnAWantThatIsNotJSON", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "a", PayloadJSON: make(chan int)})
		})
		require.Contains(t, msg, "Want.PayloadJSON (chan int) cannot be marshalled to JSON")
	})

	t.Run("FailsOnTwoMatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.emit(t, jsonEvent("order.placed", "1", `{}`), jsonEvent("order.placed", "2", `{}`))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed"})
		})
		require.Contains(t, msg, `2 events in `+b.table.String()+` match {Type "order.placed"}; want exactly one`)
		require.Contains(t, msg, events[0].ID.String())
		require.Contains(t, msg, events[1].ID.String())
	})

	t.Run("ListsTheLatestRowsWhenNoneHasTheType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var many []outbox.Event
		for range 25 {
			many = append(many, jsonEvent("cart.updated", "c", `{}`))
		}
		events := b.emit(t, many...)
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed"})
		})
		require.Contains(t, msg, "the table holds 25 events; the latest 20:")
		require.Contains(t, msg, `type "cart.updated"`)
		require.Contains(t, msg, events[24].ID.String())
		require.NotContains(t, msg, events[4].ID.String())
		require.Contains(t, msg, `differs: Type "cart.updated", want "order.placed"`)
	})

	t.Run("MatchesEveryField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := outbox.Event{
			Type: "order.placed", AggregateType: "order", AggregateID: "42", PartitionKey: "p",
			IdempotencyKey: "k", ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"n":1,"s":"x"}`),
			Headers: map[string]string{"h": "v", "empty": ""},
		}
		id := b.emit(t, want, jsonEvent("order.placed", "41", `{}`))[0].ID
		got := pgoutboxtest.RequireEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{
			Type: "order.placed", ID: id, AggregateType: "order", AggregateID: "42", PartitionKey: "p",
			IdempotencyKey: "k", ContentType: outbox.ContentTypeJSON, Payload: want.Payload,
			PayloadJSON: json.RawMessage(` { "s" : "x", "n" : 1.0e0 } `),
			Headers:     map[string]string{"empty": ""}, Status: outbox.StatusPending,
		})
		require.Equal(t, id, got.ID)
		require.Equal(t, want.Payload, got.Payload)
		require.Equal(t, want.Headers, got.Headers)
		require.Equal(t, "p", got.PartitionKey)
		require.False(t, got.CreatedAt.IsZero())
	})

	t.Run("SeesTheTransactionBeforeItCommits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx := b.begin(t)
		ids, err := b.emitter.Emit(ctx, tx, jsonEvent("order.placed", "42", `{}`))
		require.NoError(t, err)
		got := pgoutboxtest.RequireEmitted(ctx, t, tx, b.table, pgoutboxtest.Want{Type: "order.placed"})
		require.Equal(t, ids[0], got.ID)
		pgoutboxtest.RequireNotEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed"})
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed"})
		})
		require.Contains(t, msg, "a pool sees committed rows only")
	})

	t.Run("ShowsAShortExcerptOfBigPayloads", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		big := `{"blob":"` + strings.Repeat("x", 10_000) + `"}`
		b.emit(t, jsonEvent("order.placed", "1", big))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed", AggregateID: "2"})
		})
		require.Contains(t, msg, "payload `"+big[:64]+"`… (10011 bytes)")
		require.NotContains(t, msg, big[:65])
		require.Less(t, len(msg), 1000)
	})
}

func TestRequireNotEmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FailsListingTheMatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.emit(t, jsonEvent("order.placed", "42", `{"n":1}`), jsonEvent("order.placed", "43", `{}`))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireNotEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed", AggregateID: "42"})
		})
		require.Contains(t, msg, `RequireNotEmitted: 1 event in `+b.table.String()+` match {Type "order.placed", AggregateID "42"}; want none:`)
		require.Contains(t, msg, events[0].ID.String())
		require.NotContains(t, msg, events[1].ID.String())
	})

	t.Run("FailsOnAnyEventForAZeroWant", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pgoutboxtest.RequireNotEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{})
		b.emit(t, jsonEvent("a", "1", `{}`))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireNotEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{})
		})
		require.Contains(t, msg, "match {any event}; want none")
	})

	t.Run("PassesWhenAFieldDiffers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("order.placed", "42", `{"n":1}`))
		pgoutboxtest.RequireNotEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed", AggregateID: "43"})
		pgoutboxtest.RequireNotEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.placed", PayloadJSON: map[string]int{"n": 2}})
		pgoutboxtest.RequireNotEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{Type: "order.cancelled"})
	})
}

func TestRequireManyEmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FailsOnAnExtraEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.emit(t, jsonEvent("a", "1", `{}`), jsonEvent("a", "2", `{}`))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireManyEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "a"})
		})
		require.Contains(t, msg, `the events of types ["a"] in `+b.table.String()+` do not match the 1 Wants in emit order (2 found):`)
		require.Contains(t, msg, "1 event beyond the Wants:\n    seq 2  id "+events[1].ID.String())
	})

	t.Run("FailsOnAMissingEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("a", "1", `{}`))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireManyEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "a"}, pgoutboxtest.Want{Type: "b"})
		})
		require.Contains(t, msg, `wants[1] {Type "b"}`+"\n    no event in its place")
	})

	t.Run("FailsOnTheWrongOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("a", "1", `{}`), jsonEvent("b", "2", `{}`))
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireManyEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "b"}, pgoutboxtest.Want{Type: "a"})
		})
		require.Contains(t, msg, `wants[0] {Type "b"}`)
		require.Contains(t, msg, `differs: Type "a", want "b"`)
		require.Contains(t, msg, `differs: Type "b", want "a"`)
	})

	t.Run("FailsWithoutWants", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := requireFails(t, func(tb pgoutboxtest.TB) { pgoutboxtest.RequireManyEmitted(ctx, tb, b.db.Pool, b.table) })
		require.Contains(t, msg, "needs at least one Want")
	})

	t.Run("MatchesInEmitOrderIgnoringOtherTypes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.emit(t, jsonEvent("a", "1", `{}`), jsonEvent("other", "x", `{}`), jsonEvent("b", "2", `{}`), jsonEvent("a", "3", `{}`))
		got := pgoutboxtest.RequireManyEmitted(ctx, t, b.db.Pool, b.table,
			pgoutboxtest.Want{Type: "a", AggregateID: "1"}, pgoutboxtest.Want{Type: "b"}, pgoutboxtest.Want{Type: "a", AggregateID: "3"})
		require.Equal(t, []uuid.UUID{events[0].ID, events[2].ID, events[3].ID}, []uuid.UUID{got[0].ID, got[1].ID, got[2].ID})
	})

	t.Run("NamesTheWantThatIsNotJSON", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireManyEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{Type: "a"}, pgoutboxtest.Want{PayloadJSON: func() {}})
		})
		require.Contains(t, msg, "wants[1]: Want.PayloadJSON (func()) cannot be marshalled")
	})

	t.Run("WithoutATypeCountsEveryEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.emit(t, jsonEvent("a", "1", `{}`), jsonEvent("b", "2", `{}`))
		pgoutboxtest.RequireManyEmitted(ctx, t, b.db.Pool, b.table, pgoutboxtest.Want{Type: "a"}, pgoutboxtest.Want{AggregateID: "2"})
		msg := requireFails(t, func(tb pgoutboxtest.TB) {
			pgoutboxtest.RequireManyEmitted(ctx, tb, b.db.Pool, b.table, pgoutboxtest.Want{AggregateID: "1"})
		})
		require.Contains(t, msg, "the events in "+b.table.String()+" do not match the 1 Wants in emit order (2 found)")
	})
}

// The assertions see an event wherever a dispatcher left it: SENT in the
// history, FAILED in the dead letters, as well as PENDING in the outbox
// table; and the rows listed on a mismatch come from all three.
func TestRequireEmittedFindsFinishedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	sent, dead, pending := uuid.New(), uuid.New(), uuid.New()
	_, err := db.Pool.Exec(ctx, `WITH
		s AS (INSERT INTO outbox_events_sent (id, seq, event_type, status, sent_at) VALUES ($1, 100, 'order.placed', 'SENT', now())),
		d AS (INSERT INTO outbox_events_dead (id, seq, event_type, status, failed_at) VALUES ($2, 101, 'order.placed', 'FAILED', now()))
		INSERT INTO outbox_events (id, event_type) VALUES ($3, 'order.placed')`, sent, dead, pending)
	require.NoError(t, err)
	for id, status := range map[uuid.UUID]outbox.Status{sent: outbox.StatusSent, dead: outbox.StatusFailed, pending: outbox.StatusPending} {
		e := pgoutboxtest.RequireEmitted(ctx, t, db.Pool, db.Table(), pgoutboxtest.Want{Type: "order.placed", Status: status})
		require.Equal(t, id, e.ID, "status %s", status)
	}
	pgoutboxtest.RequireManyEmitted(ctx, t, db.Pool, db.Table(),
		pgoutboxtest.Want{ID: pending}, pgoutboxtest.Want{ID: sent}, pgoutboxtest.Want{ID: dead}) // in seq order
	msg := requireFails(t, func(tb pgoutboxtest.TB) {
		pgoutboxtest.RequireEmitted(ctx, tb, db.Pool, db.Table(), pgoutboxtest.Want{Type: "order.paid"})
	})
	for _, id := range []uuid.UUID{sent, dead, pending} {
		require.Contains(t, msg, id.String(), "the latest rows listed")
	}
}
