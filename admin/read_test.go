package admin_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("InvalidTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := admin.New(b.db.Pool, admin.Config{Table: outbox.Table{Name: "Bad-Name"}})
		var cerr *outbox.ConfigError
		require.ErrorAs(t, err, &cerr)
		require.Equal(t, "Table", cerr.Field)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)
	})

	t.Run("NilDB", func(t *testing.T) {
		t.Parallel()
		_, err := admin.New(nil, admin.Config{})
		var ie *outbox.InputError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "db", ie.Field)
		require.NotErrorIs(t, err, outbox.ErrInvalidConfig)
	})

	t.Run("TableDefaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, err := admin.New(b.db.Pool, admin.Config{Table: outbox.Table{Schema: b.db.Schema}})
		require.NoError(t, err)
		require.Equal(t, b.db.Table(), a.Table())
	})
}

func TestCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, err := b.admin.Counts(ctx)
		require.NoError(t, err)
		require.Zero(t, c.Total())
		require.Zero(t, c.Due)
		require.Zero(t, c.OldestDueAge)
		require.WithinDuration(t, time.Now(), c.At, time.Minute)
	})

	t.Run("PerStatusAndOldestDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, row{DueIn: -time.Hour}, row{DueIn: -time.Minute}, row{DueIn: time.Hour},
			row{Status: "PROCESSING"}, row{Status: "SENT"}, row{Status: "SENT"}, row{Status: "SENT"},
			row{Status: "FAILED", DueIn: -2 * time.Hour}, row{Status: "FAILED"})
		c, err := b.admin.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), c.Pending)
		require.Equal(t, int64(1), c.Processing)
		require.Equal(t, int64(3), c.Sent)
		require.Equal(t, int64(2), c.Failed)
		require.Equal(t, int64(9), c.Total())
		require.Equal(t, int64(2), c.Due, "the PENDING row due in an hour is not due")
		// The FAILED row due two hours ago does not count: only PENDING.
		require.GreaterOrEqual(t, c.OldestDueAge, time.Hour)
		require.Less(t, c.OldestDueAge, time.Hour+time.Minute)
	})
}

// PendingByType shows, per type, the age of its oldest PENDING event
// too: a type whose events a dispatcher claimed and released with a
// back-off (it could not route them) has few due, a small due age, and
// an oldest age that keeps growing.
func TestPendingByType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t,
		row{Type: "released", CreatedAgo: 10 * time.Minute, DueIn: time.Second},
		row{Type: "released", CreatedAgo: time.Minute, DueIn: 2 * time.Second},
		row{Type: "unclaimed", CreatedAgo: time.Hour, DueIn: -time.Hour},
		row{Type: "fresh"},
		row{Type: "released", Status: "SENT", CreatedAgo: 2 * time.Hour})
	byType, err := b.admin.PendingByType(context.Background())
	require.NoError(t, err)
	require.Len(t, byType, 3)
	within := func(d, at time.Duration) {
		t.Helper()
		require.GreaterOrEqual(t, d, at)
		require.Less(t, d, at+time.Minute)
	}
	fresh, released, unclaimed := byType[0], byType[1], byType[2]
	require.Equal(t, []any{"fresh", int64(1), int64(1)}, []any{fresh.Type, fresh.Pending, fresh.Due})
	require.Less(t, fresh.OldestAge, time.Minute)
	require.Equal(t, []any{"released", int64(2), int64(0), time.Duration(0)},
		[]any{released.Type, released.Pending, released.Due, released.OldestDueAge}, "not due during the back-off")
	within(released.OldestAge, 10*time.Minute) // the SENT row does not count
	require.Equal(t, []any{"unclaimed", int64(1), int64(1)}, []any{unclaimed.Type, unclaimed.Pending, unclaimed.Due})
	within(unclaimed.OldestDueAge, time.Hour)
	within(unclaimed.OldestAge, time.Hour)
}

// listAll walks every page of p and returns the rows in order.
func listAll(t *testing.T, a *admin.Admin, p admin.ListParams, between func()) []admin.Record {
	t.Helper()
	var all []admin.Record
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "List does not end")
		page, err := a.List(context.Background(), p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Events), max(p.Limit, 1))
		all = append(all, page.Events...)
		if page.Next.IsZero() {
			return all
		}
		p.After = page.Next
		if between != nil {
			between()
		}
	}
}

func ids(records []admin.Record) []uuid.UUID {
	out := make([]uuid.UUID, len(records))
	for i, r := range records {
		out[i] = r.ID
	}
	return out
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DefaultLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := b.insert(t, many(admin.DefaultListLimit+1, row{})...)
		page, err := b.admin.List(ctx, admin.ListParams{})
		require.NoError(t, err)
		require.Len(t, page.Events, admin.DefaultListLimit)
		require.Equal(t, want[:admin.DefaultListLimit], ids(page.Events))
		require.False(t, page.Next.IsZero())
		page, err = b.admin.List(ctx, admin.ListParams{After: page.Next})
		require.NoError(t, err)
		require.Equal(t, want[admin.DefaultListLimit:], ids(page.Events))
		require.True(t, page.Next.IsZero())
	})

	t.Run("ExactlyOnePage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := b.insert(t, many(3, row{})...)
		page, err := b.admin.List(ctx, admin.ListParams{Limit: 3})
		require.NoError(t, err)
		require.Equal(t, want, ids(page.Events))
		require.True(t, page.Next.IsZero(), "no empty trailing page")
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t, row{Type: "a"}, row{Type: "b"}, row{Type: "a", Status: "FAILED"},
			row{Type: "a", Status: "SENT"}, row{Type: "b", Status: "FAILED"})
		byType := listAll(t, b.admin, admin.ListParams{Type: "a", Limit: 1}, nil)
		require.Equal(t, []uuid.UUID{got[0], got[2], got[3]}, ids(byType))
		byStatus := listAll(t, b.admin, admin.ListParams{Status: outbox.StatusFailed, Limit: 1}, nil)
		require.Equal(t, []uuid.UUID{got[2], got[4]}, ids(byStatus))
		both := listAll(t, b.admin, admin.ListParams{Status: outbox.StatusFailed, Type: "b"}, nil)
		require.Equal(t, []uuid.UUID{got[4]}, ids(both))
		none := listAll(t, b.admin, admin.ListParams{Type: "c"}, nil)
		require.Empty(t, none)
	})

	t.Run("FiltersAggregateIDAndCode", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got := b.insert(t, row{Aggregate: "o-1"}, row{Aggregate: "o-2", Status: "FAILED", Code: "handler_error"},
			row{Aggregate: "o-1", Status: "FAILED", Code: "publish_error"}, row{Status: "FAILED", Code: "handler_error"},
			row{Aggregate: "o-1", Status: "PENDING", Code: "handler_error"})
		byAggregate := listAll(t, b.admin, admin.ListParams{AggregateID: "o-1", Limit: 1}, nil)
		require.Equal(t, []uuid.UUID{got[0], got[2], got[4]}, ids(byAggregate))
		byCode := listAll(t, b.admin, admin.ListParams{Code: outbox.CodeHandlerError, Limit: 1}, nil)
		require.Equal(t, []uuid.UUID{got[1], got[3], got[4]}, ids(byCode), "a retried row keeps its last code")
		all := listAll(t, b.admin, admin.ListParams{AggregateID: "o-1", Code: outbox.CodeHandlerError, Status: outbox.StatusPending, Type: "test.event"}, nil)
		require.Equal(t, []uuid.UUID{got[4]}, ids(all))
		require.Empty(t, listAll(t, b.admin, admin.ListParams{AggregateID: "o-3"}, nil))
	})

	t.Run("RecordFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.insert(t, row{Status: "FAILED", Type: "order.created", Code: "handler_error",
			Attempts: 3, Recoveries: 1, Snoozes: 7, Payload: []byte("secret payload")})[0]
		page, err := b.admin.List(ctx, admin.ListParams{})
		require.NoError(t, err)
		require.Len(t, page.Events, 1)
		r := page.Events[0]
		require.Equal(t, id, r.ID)
		require.Equal(t, "order.created", r.Type)
		require.Equal(t, outbox.StatusFailed, r.Status)
		require.Equal(t, outbox.CodeHandlerError, r.LastErrorCode)
		require.Equal(t, "boom: handler_error", r.LastError)
		require.Equal(t, 3, r.Attempts)
		require.Equal(t, 1, r.Recoveries)
		require.Equal(t, 7, r.Snoozes)
		require.Equal(t, len("secret payload"), r.PayloadSize)
		require.NotNil(t, r.FailedAt)
		require.Nil(t, r.SentAt)
		require.Nil(t, r.LeaseUntil)
	})

	t.Run("PagingWithConcurrentInserts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := b.insert(t, many(25, row{})...)
		var mu sync.Mutex
		var during []uuid.UUID
		walked := listAll(t, b.admin, admin.ListParams{Limit: 4}, func() {
			// Rows inserted between pages, concurrently with the walk.
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					got := b.insert(t, row{})
					mu.Lock()
					during = append(during, got...)
					mu.Unlock()
				})
			}
			wg.Wait()
		})
		seen := map[uuid.UUID]bool{}
		var lastSeq int64
		for _, r := range walked {
			require.False(t, seen[r.ID], "row %s listed twice", r.ID)
			seen[r.ID] = true
			require.Greater(t, r.Seq, lastSeq, "pages are in seq order")
			lastSeq = r.Seq
		}
		for _, id := range before {
			require.True(t, seen[id], "row %s present before the walk was not listed", id)
		}
		for _, id := range during {
			require.True(t, seen[id], "row %s committed during the walk was not listed", id)
		}
		require.Len(t, walked, len(before)+len(during))
	})

	t.Run("Cursor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := b.insert(t, many(3, row{})...)
		page, err := b.admin.List(ctx, admin.ListParams{Limit: 1})
		require.NoError(t, err)
		c, err := admin.ParseCursor(page.Next.String())
		require.NoError(t, err)
		require.Equal(t, page.Next, c)
		page, err = b.admin.List(ctx, admin.ListParams{Limit: 1, After: c})
		require.NoError(t, err)
		require.Equal(t, want[1:2], ids(page.Events))
		zero, err := admin.ParseCursor("")
		require.NoError(t, err)
		require.True(t, zero.IsZero())
		for _, bad := range []string{"x", "-1", "1.5"} {
			_, err := admin.ParseCursor(bad)
			require.ErrorIs(t, err, outbox.ErrInvalidInput, bad)
		}
	})
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Detail", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		log := `[{"attempt": 1, "outcome": "retry", "code": "publish_error", "message": "broker down",
			"owner": "w1", "started": "2024-05-01T10:00:00Z", "ended": "2024-05-01T10:00:01Z"},
			{"attempt": 2, "outcome": "failed", "code": "handler_error", "message": null,
			"owner": "w2", "started": "2024-05-01T10:01:00Z", "ended": "2024-05-01T10:01:02Z"}]`
		id := b.insert(t, row{Status: "FAILED", Code: "handler_error", Attempts: 2,
			Payload: []byte(`{"order":42}`), Headers: map[string]string{"trace": "abc"}, AttemptLog: log})[0]
		d, err := b.admin.Inspect(ctx, id)
		require.NoError(t, err)
		require.Equal(t, id, d.ID)
		require.Equal(t, outbox.StatusFailed, d.Status)
		require.Equal(t, []byte(`{"order":42}`), d.Payload)
		require.Equal(t, map[string]string{"trace": "abc"}, d.Headers)
		require.Equal(t, []admin.AttemptLogEntry{
			{Attempt: 1, Outcome: "retry", Code: outbox.CodePublishError, Message: "broker down", Owner: "w1",
				Started: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), Ended: time.Date(2024, 5, 1, 10, 0, 1, 0, time.UTC)},
			{Attempt: 2, Outcome: "failed", Code: outbox.CodeHandlerError, Owner: "w2",
				Started: time.Date(2024, 5, 1, 10, 1, 0, 0, time.UTC), Ended: time.Date(2024, 5, 1, 10, 1, 2, 0, time.UTC)},
		}, d.AttemptLog)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insert(t, row{})
		missing := uuid.New()
		_, err := b.admin.Inspect(ctx, missing)
		require.ErrorIs(t, err, admin.ErrNotFound)
		require.Equal(t, "pgoutbox: admin: inspect "+missing.String()+" in "+b.db.Table().String()+": event not found",
			err.Error(), "one pgoutbox:, one admin:")
		require.False(t, errors.Is(err, outbox.ErrInvalidInput))
	})
}
