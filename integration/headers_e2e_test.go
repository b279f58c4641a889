package integration_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/integration/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/outbox/outboxtest"
)

// headerRuleDest is the destination every event of the header-rule test
// is routed to.
const headerRuleDest = "edge"

// TestHeaderRuleEndToEnd: events at the edges of the header rule
// (outboxtest.HeaderCases) emitted in a transaction reach a consumer
// through a dispatcher and the broker byte for byte; those that break the
// rule are rejected by Emit with nothing written. A row that breaks it,
// written around Emit, is FAILED with invalid_event by natspub (which
// would change it) and reaches the consumer unchanged through kafkapub.
func TestHeaderRuleEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("NATS", func(t *testing.T) {
		t.Parallel()
		b := newTestBroker(t, "nats", natsServer(t))
		got := newReceived()
		b.create(t, context.Background(), "RULE", headerRuleDest, got)

		raw := runHeaderRule(t, b.pub, got)
		require.Equal(t, "FAILED invalid_event", raw.status, "NATS would change the row written around Emit")
	})
	t.Run("Kafka", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b := newTestBroker(t, "kafka", strings.Join(kafkaSeeds(t), ","))
		got := newReceived()
		b.create(t, ctx, "RULE", headerRuleDest, got)

		raw := runHeaderRule(t, b.pub, got)
		require.Equal(t, "SENT ", raw.status, "Kafka carries the row written around Emit")
		waitFor(t, ctx, "the row written around Emit", func() (bool, string) { return got.has(raw.event.ID), "" })
		want, e := raw.event, got.event(raw.event)
		want.Attempt, want.CreatedAt = e.Attempt, e.CreatedAt // set by the dispatcher
		require.Empty(t, outboxtest.EventDiff(want, e))
	})
}

// rawRow is a row written around Emit and where it ended.
type rawRow struct {
	event  outbox.Event
	status string // "STATUS last_error_code"
}

// runHeaderRule emits the header cases (the refused ones fail and write
// nothing), writes one refused event by SQL, dispatches everything through
// pub to the destination headerRuleDest and checks that every emitted
// event reached got byte for byte. It returns the raw row once it is
// final.
func runHeaderRule(t *testing.T, pub outbox.Publisher, got *received) rawRow {
	t.Helper()
	// Ends at return, as the dispatchers this starts must.
	ctx, cancel := context.WithCancel(testctx.New(t))
	defer cancel()
	db := pgtest.NewMigrated(t)
	em, err := emitter.New(emitter.Config{Table: db.Table()})
	require.NoError(t, err)

	var emitted []outbox.Event
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, c := range outboxtest.HeaderCases() {
		_, err := em.Emit(ctx, tx, c.Event)
		if c.Field == "" {
			require.NoError(t, err, c.Name)
			emitted = append(emitted, c.Event)
			continue
		}
		var verr *outbox.ValidationError
		require.ErrorAs(t, err, &verr, c.Name)
		require.Equal(t, c.Field, verr.Field, c.Name)
	}
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, len(emitted), countRows(t, ctx, db, "true"), "a refused event was written")

	raw := rawRow{event: outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "order.created",
		AggregateID: " agg-2 ", Headers: map[string]string{"x/y": "v"}, Payload: []byte("x")}}
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id, headers, payload)
		VALUES ($1, $2, $3, $4, $5)`, raw.event.ID, raw.event.Type, raw.event.AggregateID, raw.event.Headers, raw.event.Payload)
	require.NoError(t, err)

	runDispatcher(t, ctx, db, dispatcher.Config{
		Publisher: pub, RouteFunc: func(outbox.Event) string { return headerRuleDest },
		PollInterval: 50 * time.Millisecond,
	})

	waitFor(t, ctx, "every emitted event at the consumer", func() (bool, string) {
		for _, e := range emitted {
			if !got.has(e.ID) {
				return false, "missing " + e.ID.String()
			}
		}
		return true, ""
	})
	for i, want := range emitted {
		e := got.event(want)
		require.Equal(t, 1, e.Attempt)
		want.Attempt, want.CreatedAt = e.Attempt, e.CreatedAt // set by the dispatcher
		require.Empty(t, outboxtest.EventDiff(want, e), "event %d", i)
	}
	raw.status = awaitEnd(t, ctx, db, raw.event.ID)
	return raw
}

// runDispatcher runs a dispatcher of cfg on db's table, logging nowhere,
// until the test ends, then stops it and checks that it stopped cleanly.
func runDispatcher(t *testing.T, ctx context.Context, db *pgtest.DB, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	cfg.Table, cfg.Logger = db.Table(), quietLogger()
	d, err := dispatcher.New(db.Pool, cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		require.NoError(t, d.Stop(stopCtx))
		require.NoError(t, <-done)
	})
	return d
}

// received collects the events a consumer decoded, by ID.
type received struct {
	mu     sync.Mutex
	events map[uuid.UUID]outbox.Event
}

func newReceived() *received { return &received{events: map[uuid.UUID]outbox.Event{}} }

func (r *received) add(e outbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[e.ID] = e
}

func (r *received) has(id uuid.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.events[id]
	return ok
}

func (r *received) event(want outbox.Event) outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[want.ID]
}
