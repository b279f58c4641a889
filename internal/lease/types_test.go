package lease_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

func TestTypedClaim(t *testing.T) {
	t.Parallel()

	t.Run("only the named types, in due order across them", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ids := insert(t, e.db.Pool,
			spec{Type: "b", DueIn: -time.Minute}, spec{Type: "z", DueIn: -time.Hour}, spec{Type: "a", DueIn: -2 * time.Minute},
			spec{Type: "a", DueIn: time.Hour}, spec{Type: "b", Status: "SENT"}, spec{Type: "a"})
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, Types: []string{"a", "b"}})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ids[2], ids[0], ids[5]}, batchIDs(b))
		require.Equal(t, "PENDING", get(t, e.db.Pool, ids[1]).Status, "another type is left alone")
		require.Equal(t, "PENDING", get(t, e.db.Pool, ids[3]).Status, "not due yet")
	})

	t.Run("an empty set of types claims nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insertDue(t, e.db.Pool, 2)
		b, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, Types: []string{}})
		require.NoError(t, err)
		require.Empty(t, b.Events)
		require.Equal(t, 2, countStatus(t, e.db.Pool, "PENDING"))
	})

	t.Run("concurrent claims of the same types skip each other's rows and share them all", func(t *testing.T) {
		t.Parallel()
		const claimers, limit, perType = 10, 10, 100
		e := newEnv(t)
		var specs []spec
		for i := range perType {
			specs = append(specs, spec{Type: "a", DueIn: -time.Duration(i) * time.Millisecond}, spec{Type: "b"}, spec{Type: "other"})
		}
		insert(t, e.db.Pool, specs...)
		pool := e.db.NewPool(t, claimers)
		start := make(chan struct{})
		var mu sync.Mutex
		seen := map[uuid.UUID]int{}
		errs := make([]error, claimers)
		var wg sync.WaitGroup
		for i := range claimers {
			wg.Go(func() {
				<-start
				for {
					b, err := e.store.Claim(t.Context(), pool, lease.ClaimParams{
						Owner: fmt.Sprint("c", i), Limit: limit, Lease: time.Minute, Types: []string{"a", "b"},
					})
					if err != nil || len(b.Events) == 0 {
						errs[i] = err
						return
					}
					mu.Lock()
					for _, ev := range b.Events {
						seen[ev.ID]++
						if ev.Type == "other" {
							errs[i] = errors.New("claimed a row of another type")
						}
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		require.Len(t, seen, 2*perType, "every row of the two types claimed")
		for id, n := range seen {
			require.Equal(t, 1, n, "row %s claimed %d times", id, n)
		}
		require.Equal(t, perType, countStatus(t, e.db.Pool, "PENDING"), "the other type's rows stay")
	})

	t.Run("next due looks at the named types only", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		insert(t, e.db.Pool, spec{Type: "other"}, spec{Type: "a", DueIn: time.Hour})
		wait, ok, err := e.store.NextDue(t.Context(), e.db.Pool, []string{"a", "b"})
		require.NoError(t, err)
		require.True(t, ok)
		require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), 60)
		_, ok, err = e.store.NextDue(t.Context(), e.db.Pool, []string{"b"})
		require.NoError(t, err)
		require.False(t, ok)
	})
}

func TestWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var specs []spec
	for range 5 {
		specs = append(specs, spec{Type: "x", DueIn: -time.Hour}, spec{Type: "mine", DueIn: -time.Hour})
	}
	specs = append(specs,
		spec{Type: "y", DueIn: -time.Hour}, spec{Type: "y", DueIn: -time.Second}, // one due long enough
		spec{Type: "z", DueIn: time.Hour}, spec{Type: "w", Status: "FAILED"}, spec{Type: "v", Status: "PROCESSING"})
	insert(t, e.db.Pool, specs...)

	got, err := e.store.Waiting(t.Context(), e.db.Pool, lease.WaitingParams{
		Except: []string{"mine"}, DueFor: time.Minute, PerType: 3, MaxTypes: 100,
	})
	require.NoError(t, err)
	require.Equal(t, []lease.TypeCount{{Type: "x", Count: 3}, {Type: "y", Count: 1}}, got, "x capped at 3 per type")

	got, err = e.store.Waiting(t.Context(), e.db.Pool, lease.WaitingParams{DueFor: 0, PerType: 100, MaxTypes: 2})
	require.NoError(t, err)
	require.Equal(t, []lease.TypeCount{{Type: "mine", Count: 5}, {Type: "x", Count: 5}}, got, "only the first 2 types looked at")

	_, err = e.store.Waiting(t.Context(), e.db.Pool, lease.WaitingParams{PerType: 0, MaxTypes: 1})
	require.Error(t, err)
}
