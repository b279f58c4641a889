package lease_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// claimForms are the sources of an ordered claim: every type, and the
// typed form (the rows of these tests all have the default type unless
// they say otherwise), each by key and by key and type (ByType: with one
// type, the same results).
var claimForms = []struct {
	name   string
	types  []string
	byType bool
}{{"all types", nil, false}, {"typed", []string{"test.event", "other"}, false},
	{"all types by type", nil, true}, {"typed by type", []string{"test.event", "other"}, true}}

// oenv is an env whose ordered claims are by type or not.
type oenv struct {
	env
	byType bool
}

// forEachForm runs f as a parallel subtest for each claim form.
func forEachForm(t *testing.T, f func(t *testing.T, e oenv, types []string)) {
	t.Helper()
	for _, form := range claimForms {
		t.Run(form.name, func(t *testing.T) {
			t.Parallel()
			f(t, oenv{newEnv(t, testdb.KeyOrder), form.byType}, form.types)
		})
	}
}

// claimOrdered claims up to limit rows in ordered mode on db.
func claimOrdered(t *testing.T, e oenv, db lease.DB, types []string, limit int, blockFailed bool) lease.Batch {
	t.Helper()
	b, err := e.store.Claim(t.Context(), db, lease.ClaimParams{Owner: "w", Limit: limit, Lease: time.Minute,
		Types: types, Ordered: true, BlockFailed: blockFailed, ByType: e.byType})
	require.NoError(t, err)
	require.Len(t, b.Keys, len(b.Events))
	return b
}

// keyed is a due PENDING row of key k (as its partition key).
func keyed(k string) spec { return spec{PartitionKey: k} }

// keyedBy returns n due PENDING rows of key k, the first as s.
func keyedBy(k string, n int, first spec) []spec {
	specs := []spec{first}
	for range n - 1 {
		specs = append(specs, keyed(k))
	}
	specs[0].PartitionKey = k
	return specs
}

func TestOrderedClaimBlockedHeads(t *testing.T) {
	t.Parallel()
	heads := []struct {
		name        string
		head        spec
		blockFailed bool
		skipped     bool
		blocks      bool
	}{
		{name: "processing", head: spec{Status: "PROCESSING"}, blocks: true},
		{name: "pending not due (a retry)", head: spec{DueIn: time.Hour}, blocks: true},
		{name: "failed under BlockFailed", head: spec{Status: "FAILED"}, blockFailed: true, blocks: true},
		{name: "failed without BlockFailed", head: spec{Status: "FAILED"}},
		{name: "failed and skipped under BlockFailed", head: spec{Status: "FAILED"}, blockFailed: true, skipped: true},
		{name: "sent", head: spec{Status: "SENT"}, blockFailed: true},
	}
	for _, h := range heads {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			forEachForm(t, func(t *testing.T, e oenv, types []string) {
				ids := insert(t, e.db.Pool, append(keyedBy("k", 3, h.head), keyed("other"), spec{}, spec{AggregateID: "agg"})...)
				if h.skipped {
					_, err := e.db.Pool.Exec(t.Context(), `UPDATE outbox_events_dead SET skipped_at = now() WHERE id = $1`, ids[0])
					require.NoError(t, err)
				}
				b := claimOrdered(t, e, e.db.Pool, types, 10, h.blockFailed)
				if h.blocks {
					require.Equal(t, []uuid.UUID{ids[3], ids[4], ids[5]}, batchIDs(b), "key k is blocked by its head")
					require.Equal(t, []string{"other", "", "agg"}, b.Keys)
					require.Equal(t, 2, countStatus(t, e.db.Pool, "PENDING")-boolInt(h.head.DueIn > 0))
					return
				}
				require.Equal(t, []uuid.UUID{ids[1], ids[2], ids[3], ids[4], ids[5]}, batchIDs(b), "key k moves on")
				require.Equal(t, []string{"k", "k", "other", "", "agg"}, b.Keys)
			})
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A row locked by another transaction's open statement or transaction is
// skipped by the claim's locking read; if it is the head of its key, the
// claim takes no later row of that key either (the barrier), but other
// keys' rows and keyless rows.
func TestOrderedClaimHeadLockedElsewhere(t *testing.T) {
	t.Parallel()
	forEachForm(t, func(t *testing.T, e oenv, types []string) {
		ids := insert(t, e.db.Pool, append(keyedBy("k", 3, spec{}), keyed("other"), spec{})...)
		holder, err := e.db.Conn(t).Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(t.Context()) }()
		_, err = holder.Exec(t.Context(), `SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE`, ids[0])
		require.NoError(t, err)

		b := claimOrdered(t, e, e.db.Pool, types, 10, true)
		require.Equal(t, []uuid.UUID{ids[3], ids[4]}, batchIDs(b))
		for _, id := range ids[:3] {
			require.Equal(t, "PENDING", get(t, e.db.Pool, id).Status)
		}

		require.NoError(t, holder.Rollback(t.Context()))
		b = claimOrdered(t, e, e.db.Pool, types, 10, true)
		require.Equal(t, ids[:3], batchIDs(b), "the whole run once the head is free")
	})
}

func TestOrderedClaimRuns(t *testing.T) {
	t.Parallel()

	t.Run("a run of five due events comes in one claim in seq order", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			ids := insert(t, e.db.Pool, keyedBy("k", 5, spec{})...)
			b := claimOrdered(t, e, e.db.Pool, types, 10, true)
			require.Equal(t, ids, batchIDs(b))
			require.Equal(t, []string{"k", "k", "k", "k", "k"}, b.Keys)
		})
	})

	t.Run("a run stops before an event that is not due", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			specs := keyedBy("k", 5, spec{})
			specs[2].DueIn = time.Hour
			ids := insert(t, e.db.Pool, specs...)
			b := claimOrdered(t, e, e.db.Pool, types, 10, true)
			require.Equal(t, ids[:2], batchIDs(b))
			require.Equal(t, 3, countStatus(t, e.db.Pool, "PENDING"))
		})
	})

	t.Run("a limit cuts a run to its prefix", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			ids := insert(t, e.db.Pool, keyedBy("k", 5, spec{})...)
			b := claimOrdered(t, e, e.db.Pool, types, 3, true)
			require.Equal(t, ids[:3], batchIDs(b))
			b = claimOrdered(t, e, e.db.Pool, types, 3, true)
			require.Empty(t, b.Events, "the rest waits behind the claimed head")
		})
	})

	t.Run("a run follows seq order from its head, whatever the due order of its rows", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			// Row 1 (a retry) became due after rows 2 and 3: due order is
			// 0, 2, 3, 1, seq order 0, 1, 2, 3; a limit of 3 takes 0, 1, 2.
			specs := keyedBy("k", 4, spec{DueIn: -time.Hour})
			specs[1].DueIn = -time.Second
			specs[2].DueIn, specs[3].DueIn = -time.Minute, -time.Minute
			ids := insert(t, e.db.Pool, specs...)
			b := claimOrdered(t, e, e.db.Pool, types, 3, true)
			require.Equal(t, ids[:3], batchIDs(b))
			b = claimOrdered(t, e, e.db.Pool, types, 3, true)
			require.Empty(t, b.Events, "the rest waits behind the claimed run")
		})
	})

	t.Run("a head retried after more successors than a claim takes is still claimed", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			// The head became due after its successors (released when
			// it failed, keeping their emit time): in due order the
			// successors fill any limit before the head.
			specs := keyedBy("k", 6, spec{DueIn: -time.Second})
			for i := 1; i < len(specs); i++ {
				specs[i].DueIn = -time.Hour
			}
			ids := insert(t, e.db.Pool, specs...)
			b := claimOrdered(t, e, e.db.Pool, types, 2, true)
			require.Equal(t, ids[:2], batchIDs(b))
		})
	})

	t.Run("a run stops before a successor of a type the claim does not take", func(t *testing.T) {
		t.Parallel()
		e := oenv{env: newEnv(t, testdb.KeyOrder)}
		specs := keyedBy("k", 4, spec{})
		specs[2].Type = "foreign"
		ids := insert(t, e.db.Pool, specs...)
		b := claimOrdered(t, e, e.db.Pool, []string{"test.event"}, 10, true)
		require.Equal(t, ids[:2], batchIDs(b))
	})

	t.Run("the rows of a key come in seq order when their due order differs", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			specs := append(keyedBy("k", 2, spec{DueIn: -time.Second}), spec{DueIn: -time.Minute})
			specs[1].DueIn = -time.Hour
			ids := insert(t, e.db.Pool, specs...)
			b := claimOrdered(t, e, e.db.Pool, types, 10, true)
			// Due order is 1, 2, 0; key k keeps positions 0 and 2.
			require.Equal(t, []uuid.UUID{ids[0], ids[2], ids[1]}, batchIDs(b))
			require.Equal(t, []string{"k", "", "k"}, b.Keys)
		})
	})

	t.Run("an aggregate id is the key without a partition key", func(t *testing.T) {
		t.Parallel()
		forEachForm(t, func(t *testing.T, e oenv, types []string) {
			ids := insert(t, e.db.Pool, spec{AggregateID: "a", Status: "PROCESSING"}, spec{AggregateID: "a"},
				spec{AggregateID: "a", PartitionKey: "p"}, spec{PartitionKey: "a"})
			b := claimOrdered(t, e, e.db.Pool, types, 10, true)
			require.Equal(t, []uuid.UUID{ids[2]}, batchIDs(b), "key a is blocked, key p is not")
		})
	})
}

// A blocked key's backlog of due rows does not take the claim's limit.
func TestOrderedClaimBlockedBacklogDoesNotStarve(t *testing.T) {
	t.Parallel()
	forEachForm(t, func(t *testing.T, e oenv, types []string) {
		specs := keyedBy("hot", 1001, spec{Status: "PROCESSING", DueIn: -2 * time.Hour})
		for i := 1; i < len(specs); i++ {
			specs[i].DueIn = -time.Hour // due before every other key's rows
		}
		for range 20 {
			specs = append(specs, keyed(uuid.NewString()))
		}
		ids := insert(t, e.db.Pool, specs...)
		b := claimOrdered(t, e, e.db.Pool, types, 10, true)
		require.Equal(t, ids[1001:1011], batchIDs(b))
	})
}

// A claim whose snapshot is older than another claimer's claim of a key's
// head must not take the key's next event: its locking read does not
// return the head (taken since), so the head is the barrier. Claimer A
// takes its snapshot and is paused on the head; B claims the head and
// commits; then A goes on.
func TestOrderedClaimStaleSnapshot(t *testing.T) {
	t.Parallel()
	for i, form := range claimForms {
		t.Run(form.name, func(t *testing.T) {
			t.Parallel()
			e := oenv{env: newEnv(t, testdb.KeyOrder)}
			ids := insert(t, e.db.Pool, keyed("k"), keyed("k"), keyed("other"))
			key := int64(7_000 + i)
			role := e.db.NewRole(t, "claimer")
			pause := e.db.PauseRowReads(t, role, ids[0].String(), key)
			_, err := e.db.Pool.Exec(t.Context(), `GRANT SELECT ON outbox_events_dead TO `+pgx.Identifier{role}.Sanitize())
			require.NoError(t, err)
			a := e.db.RoleConn(t, role)

			done := make(chan lease.Batch, 1)
			go func() {
				b, err := e.store.Claim(t.Context(), a, lease.ClaimParams{Owner: "a", Limit: 10, Lease: time.Minute,
					Types: form.types, Ordered: true, BlockFailed: true})
				if err != nil {
					t.Error(err)
				}
				done <- b
			}()
			pause.AwaitPaused(t)
			b := claimOrdered(t, e, e.db.Pool, form.types, 1, true)
			require.Equal(t, ids[:1], batchIDs(b), "B takes the head")
			pause.Release(t)

			got := <-done
			require.Equal(t, ids[2:], batchIDs(got), "A takes the other key only")
			require.Equal(t, "PENDING", get(t, e.db.Pool, ids[1]).Status)
		})
	}
}

// Claimers that claim in ordered mode at once, and complete each key's run
// in seq order up to a random failure (a retry due at once; the rest of
// the run is released unchanged, as the dispatcher does), never hold the
// same key at once and send every key's events in seq order, each once.
func TestOrderedClaimConcurrentClaimersKeepKeyOrder(t *testing.T) {
	t.Parallel()
	const claimers, keys, perKey = 6, 40, 15
	forEachForm(t, func(t *testing.T, e oenv, types []string) {
		var specs []spec
		for i := range perKey {
			for k := range keys {
				specs = append(specs, spec{PartitionKey: "k" + strconv.Itoa(k), Payload: []byte(strconv.Itoa(i))})
			}
		}
		insert(t, e.db.Pool, specs...)
		pool := e.db.NewPool(t, claimers)
		var mu sync.Mutex
		held, sent := map[string]bool{}, map[string]int{}
		var wg sync.WaitGroup
		for c := range claimers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), 1))
				for {
					b, err := e.store.Claim(t.Context(), pool, lease.ClaimParams{Owner: "w", Limit: 1 + rng.IntN(8),
						Lease: time.Minute, Types: types, Ordered: true, BlockFailed: true})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					done := len(b.Events) == 0 && countSent(sent) == keys*perKey
					for _, k := range b.Keys {
						if held[k] {
							t.Errorf("key %s claimed while held elsewhere", k)
						}
					}
					for _, k := range b.Keys {
						held[k] = true
					}
					mu.Unlock()
					if done {
						return
					}
					settleRuns(t, e.env, pool, b, rng, &mu, held, sent)
				}
			})
		}
		wg.Wait()
		require.Equal(t, keys*perKey, countStatus(t, e.db.Pool, "SENT"))
	})
}

func countSent(sent map[string]int) int {
	n := 0
	for _, v := range sent {
		n += v
	}
	return n
}

// settleRuns completes b: per key, the events in order until one fails
// at random (retried at once) and the rest of that key released. It
// checks each sent event is the next of its key, and frees the keys
// before it writes, so that no other claimer can take them before.
func settleRuns(t *testing.T, e env, db lease.DB, b lease.Batch, rng *rand.Rand, mu *sync.Mutex, held map[string]bool, sent map[string]int) {
	t.Helper()
	var p lease.CompleteParams
	var release []lease.Ref
	stopped := map[string]bool{}
	mu.Lock()
	for i, ev := range b.Events {
		k, ref := b.Keys[i], lease.Ref{ID: ev.ID, Token: b.Token}
		switch {
		case stopped[k]:
			release = append(release, ref)
		case rng.IntN(5) == 0:
			stopped[k] = true
			p.Failed = append(p.Failed, lease.Failure{Ref: ref, Code: "test", Message: "try again"})
		default:
			if want := strconv.Itoa(sent[k]); string(ev.Payload) != want {
				t.Errorf("key %s: sent event %s, want %s", k, ev.Payload, want)
			}
			sent[k]++
			p.Sent = append(p.Sent, ref)
		}
	}
	for _, k := range b.Keys {
		held[k] = false
	}
	mu.Unlock()
	// A row can be locked for a moment by another claimer's locking read
	// (found no longer PENDING, but locked until its statement ends):
	// Release reports it busy, and the dispatcher tries again, as here.
	for try := 0; len(release) > 0; try++ {
		require.Less(t, try, 10000, "release stays busy")
		res, err := e.store.Release(t.Context(), db, release)
		require.NoError(t, err)
		release = res.Busy
		if len(release) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	_, err := e.store.Complete(t.Context(), db, p)
	require.NoError(t, err)
}

// In the typed claim a key whose head is a due row of a type the claim
// does not take is blocked for it like any other key (its run would end
// before it starts): the key's rows of the claimed types must not take
// the claim's limit, or a dispatcher of some types starves behind the
// keys whose heads wait for another dispatcher (one that is down, or
// busy).
func TestOrderedClaimTypedHeadOfAnotherType(t *testing.T) {
	t.Parallel()
	e := oenv{env: newEnv(t, testdb.KeyOrder)}
	var specs []spec
	for i := range 10 {
		k := fmt.Sprintf("y%d", i)
		specs = append(specs, spec{Type: "other.event", PartitionKey: k}, keyed(k))
	}
	ids := insert(t, e.db.Pool, append(specs, keyed("m"))...)
	b := claimOrdered(t, e, e.db.Pool, []string{"test.event"}, 5, true)
	require.Equal(t, ids[len(ids)-1:], batchIDs(b), "key m's row, not the rows held back by other types' heads")
}

// NextHeadDue counts only rows an ordered claim can take: a due row behind
// a blocked head is not due work, a head waiting for its retry is.
func TestOrderedNextHeadDue(t *testing.T) {
	t.Parallel()
	forEachForm(t, func(t *testing.T, e oenv, types []string) {
		insert(t, e.db.Pool, spec{Status: "FAILED", PartitionKey: "k"}, keyed("k"),
			spec{DueIn: time.Hour, PartitionKey: "j"}, keyed("j"), spec{Status: "PROCESSING", PartitionKey: "p"}, keyed("p"))
		wait, ok, err := e.store.NextHeadDue(t.Context(), e.db.Pool, types, true, e.byType)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, wait, 30*time.Minute, "j's head, in its backoff; not k's or p's due rows")

		wait, ok, err = e.store.NextHeadDue(t.Context(), e.db.Pool, types, false, e.byType)
		require.NoError(t, err)
		require.True(t, ok)
		require.LessOrEqual(t, wait, time.Duration(0), "without BlockFailed k's second row is its head")

		insert(t, e.db.Pool, spec{})
		wait, ok, err = e.store.NextHeadDue(t.Context(), e.db.Pool, types, true, e.byType)
		require.NoError(t, err)
		require.True(t, ok)
		require.LessOrEqual(t, wait, time.Duration(0), "a keyless row is due")
	})
}

// Under ByType the head of (key, type) holds only that pair: a key's
// events of another type go on past it, as a run of their own in seq
// order, while without ByType the head holds every type of its key.
func TestOrderedClaimByType(t *testing.T) {
	t.Parallel()
	for _, types := range [][]string{nil, {"a", "b"}} {
		t.Run(fmt.Sprint("types ", types), func(t *testing.T) {
			t.Parallel()
			e := oenv{env: newEnv(t, testdb.KeyOrder)}
			a, b := spec{Type: "a", PartitionKey: "k"}, spec{Type: "b", PartitionKey: "k"}
			failedA, notDueB := a, b
			failedA.Status, notDueB.DueIn = "FAILED", time.Hour
			ids := insert(t, e.db.Pool, failedA, b, a, b, b, notDueB, b,
				spec{Type: "a", AggregateID: "j", Status: "PROCESSING"}, spec{Type: "b", AggregateID: "j"})

			byKey := claimOrdered(t, e, e.db.Pool, types, 10, true)
			require.Empty(t, byKey.Events, "by key, k's FAILED head and j's PROCESSING one hold every type")

			got, err := e.store.Claim(t.Context(), e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute,
				Types: types, Ordered: true, BlockFailed: true, ByType: true})
			require.NoError(t, err)
			require.Equal(t, []uuid.UUID{ids[1], ids[3], ids[4], ids[8]}, batchIDs(got),
				"k's b run up to its row not due, and j's b; no a")
			require.Equal(t, []string{"k", "k", "k", "j"}, got.Keys)
			require.Equal(t, "PENDING", get(t, e.db.Pool, ids[2]).Status, "k's a waits behind its FAILED head")
		})
	}
}

// NextHeadDue by type counts a row behind a head of another type of its
// key as due.
func TestOrderedNextHeadDueByType(t *testing.T) {
	t.Parallel()
	forEachForm(t, func(t *testing.T, e oenv, types []string) {
		insert(t, e.db.Pool, spec{Status: "FAILED", PartitionKey: "k", Type: "other"}, keyed("k"))
		_, ok, err := e.store.NextHeadDue(t.Context(), e.db.Pool, types, true, false)
		require.NoError(t, err)
		require.False(t, ok, "by key, k's due row waits behind its FAILED head")
		wait, ok, err := e.store.NextHeadDue(t.Context(), e.db.Pool, types, true, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.LessOrEqual(t, wait, time.Duration(0), "by type, k's test.event row is its pair's head")
	})
}
