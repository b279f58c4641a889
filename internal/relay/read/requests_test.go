package read_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/read"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// admin returns the operator API on the env's log.
func (e env) admin(t *testing.T) *admin.Relay {
	t.Helper()
	a, err := admin.NewRelay(e.db.Pool, admin.RelayConfig{Log: e.table})
	require.NoError(t, err)
	return a
}

// parkedRows counts key's parked events and key rows of group "g".
func (e env) parkedRows(t *testing.T, key string) (events, keys int) {
	t.Helper()
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM `+relaytest.LogName+`_parked WHERE grp = 'g' AND key = $1),
		(SELECT count(*) FROM `+relaytest.LogName+`_parked_keys WHERE grp = 'g' AND key = $1)`, key).Scan(&events, &keys))
	return events, keys
}

// parkKey has pub refuse key, emits n events of it and waits until the
// reader's moves parked them.
func parkKey(t *testing.T, e env, pub *fakePub, moved <-chan read.BatchStats, key string, n int) []uuid.UUID {
	t.Helper()
	pub.mu.Lock()
	pub.park[key] = true
	pub.mu.Unlock()
	ids := relaytest.Emit(t, e.db.Pool, key, n)
	waitParked(moved, n)
	events, keys := e.parkedRows(t, key)
	require.Equal(t, n, events)
	require.Equal(t, 1, keys)
	return ids
}

// waitParked waits for moves that parked n events in all (a tick can
// come before the events' commit: a move of no events).
func waitParked(moved <-chan read.BatchStats, n int) {
	for parked := 0; parked < n; {
		parked += (<-moved).Parked
	}
}

func (f *fakePub) accept(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.park, key)
}

// keyIDs is the ids of key's events.
func keyIDs(events []batch.Event, key string) []uuid.UUID {
	var out []uuid.UUID
	for _, ev := range events {
		if ev.Key() == key {
			out = append(out, ev.Event.ID)
		}
	}
	return out
}

func publishedIDs(pub *fakePub) []uuid.UUID {
	var out []uuid.UUID
	for _, ev := range pub.snapshot() {
		out = append(out, ev.Event.ID)
	}
	return out
}

// TestReplayPublishesParkedEventsBeforeTheKeysNewOnes: a replay request
// carried out at the next batch boundary publishes the key's parked
// events (seq order) before its events of that batch, in the same call,
// deletes the rows in the batch's move, and the key flows again.
func TestReplayPublishesParkedEventsBeforeTheKeysNewOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	moved := make(chan read.BatchStats, 100)
	settled := make(chan read.SettleStats, 100)
	e.runReader(t, pub, read.Config{RequestsEvery: 1, NoReadAhead: true, OnBatch: func(s read.BatchStats) { moved <- s },
		OnSettle: func(s read.SettleStats) { settled <- s }})
	parkedIDs := parkKey(t, e, pub, moved, "bad", 2)
	parkedIDs = append(parkedIDs, relaytest.Emit(t, e.db.Pool, "bad", 1)...) // parked behind the key
	waitParked(moved, 1)
	pub.accept("bad")

	// The reader publishes a batch of another key and waits there while
	// the request is made and the key's new events are ticked: the next
	// boundary has both.
	hold := make(chan struct{})
	pub.mu.Lock()
	pub.hold = hold
	pub.mu.Unlock()
	other := relaytest.Emit(t, e.db.Pool, "k", 1)
	<-pub.blocked
	require.NoError(t, e.admin(t).RequestReplay(t.Context(), "g", "bad"))
	newIDs := relaytest.Emit(t, e.db.Pool, "bad", 2)
	e.waitTicked(t, newIDs[1])
	pub.mu.Lock()
	pub.hold = nil
	pub.mu.Unlock()
	close(hold)

	require.Equal(t, read.SettleStats{Replayed: 3, Unparked: 1}, <-settled)
	waitPublished(t, pub, 6)
	want := append(append([]uuid.UUID(nil), parkedIDs...), newIDs...)
	require.Equal(t, want, keyIDs(pub.snapshot(), "bad"), "the parked events, then the new ones")
	require.Contains(t, publishedIDs(pub), other[0])
	var last call // the replay's: the last call with the first parked event
	pub.mu.Lock()
	for _, c := range pub.calls {
		if slices.Contains(keyIDs(c.events, "bad"), parkedIDs[0]) {
			last = c
		}
	}
	pub.mu.Unlock()
	require.Equal(t, want, keyIDs(last.events, "bad"), "replayed with the batch, in one call")
	require.Equal(t, parkedIDs, keyIDs(last.events[:3], "bad"), "the replayed events first")
	require.False(t, last.parked["bad"], "unparked for the call")
	events, keys := e.parkedRows(t, "bad")
	require.Zero(t, events)
	require.Zero(t, keys)

	later := relaytest.Emit(t, e.db.Pool, "bad", 1)
	waitPublished(t, pub, 7)
	require.Equal(t, later[0], publishedIDs(pub)[6], "the key flows again")
}

// waitTicked waits until a tick's snapshot sees the event id committed.
func (e env) waitTicked(t *testing.T, id uuid.UUID) {
	t.Helper()
	for {
		var seen bool
		require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM `+relaytest.LogName+`_ticks AS k, `+
			relaytest.LogName+` AS e WHERE e.id = $1 AND pg_visible_in_snapshot(e.xid, k.snapshot))`, id).Scan(&seen))
		if seen {
			return
		}
		select {
		case <-e.wake: // a tick was recorded (the reader is held in a publish and does not read it)
		case <-t.Context().Done():
			t.Fatal("test ended")
		}
	}
}

// TestSkipWhileIdle: a skip request is carried out by an idle reader (no
// batch): the rows go, fenced, and the key's later events flow.
func TestSkipWhileIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	moved := make(chan read.BatchStats, 100)
	settled := make(chan read.SettleStats, 100)
	e.runReader(t, pub, read.Config{PollInterval: 5 * time.Millisecond, OnBatch: func(s read.BatchStats) { moved <- s },
		OnSettle: func(s read.SettleStats) { settled <- s }})
	parkKey(t, e, pub, moved, "bad", 2)
	pub.accept("bad")

	require.NoError(t, e.admin(t).RequestSkip(t.Context(), "g", "bad"))
	require.Equal(t, read.SettleStats{Unparked: 1}, <-settled)
	events, keys := e.parkedRows(t, "bad")
	require.Zero(t, events)
	require.Zero(t, keys)
	require.Empty(t, pub.snapshot(), "skipped: never published")

	later := relaytest.Emit(t, e.db.Pool, "bad", 1)
	waitPublished(t, pub, 1)
	require.Equal(t, later, publishedIDs(pub))
}

// TestReplayThatFailsAgainKeepsTheKeyParked: the replayed events are
// refused again: the key stays parked with the new error, its rows stay
// and its request is cleared.
func TestReplayThatFailsAgainKeepsTheKeyParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	moved := make(chan read.BatchStats, 100)
	settled := make(chan read.SettleStats, 100)
	e.runReader(t, pub, read.Config{PollInterval: 5 * time.Millisecond, OnBatch: func(s read.BatchStats) { moved <- s },
		OnSettle: func(s read.SettleStats) { settled <- s }})
	parked := parkKey(t, e, pub, moved, "bad", 2)
	pub.mu.Lock()
	pub.parkErr = "refused again"
	pub.mu.Unlock()

	require.NoError(t, e.admin(t).RequestReplay(t.Context(), "g", "bad"))
	require.Equal(t, read.SettleStats{Replayed: 2, Reparked: 1}, <-settled)
	events, keys := e.parkedRows(t, "bad")
	require.Equal(t, 2, events)
	require.Equal(t, 1, keys)
	page, err := e.admin(t).ParkedKeys(t.Context(), "g", admin.ParkedKeysQuery{})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "refused again", page[0].Error)
	require.Nil(t, page[0].ReplayRequestedAt, "the request was carried out")
	evs, err := e.admin(t).ParkedEvents(t.Context(), "g", admin.ParkedEventsQuery{Key: "bad"})
	require.NoError(t, err)
	require.Equal(t, parked, []uuid.UUID{evs[0].ID, evs[1].ID})

	relaytest.Emit(t, e.db.Pool, "bad", 1)
	waitParked(moved, 1) // still parked
	require.Empty(t, pub.snapshot())
}

// TestRequestRacingALeaseChange: the holder that read a replay request
// loses its lease while it publishes: nothing of the request is recorded,
// and the next holder carries it out, once.
func TestRequestRacingALeaseChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pubA := newFake()
	movedA := make(chan read.BatchStats, 100)
	errs := make(chan error, 100)
	stopA, resA := e.runReader(t, pubA, read.Config{Owner: "a", Lease: 300 * time.Millisecond, RequestsEvery: 1,
		OnBatch: func(s read.BatchStats) { movedA <- s }, OnError: func(err error) { errs <- err }})
	parked := parkKey(t, e, pubA, movedA, "bad", 2)
	pubA.mu.Lock()
	pubA.block = true
	delete(pubA.park, "bad")
	pubA.mu.Unlock()

	require.NoError(t, e.admin(t).RequestReplay(t.Context(), "g", "bad"))
	next := relaytest.Emit(t, e.db.Pool, "k", 1)
	<-pubA.blocked
	pubA.mu.Lock()
	require.Equal(t, parked, []uuid.UUID{pubA.calls[len(pubA.calls)-1].events[0].Event.ID,
		pubA.calls[len(pubA.calls)-1].events[1].Event.ID}, "a publishes the replay")
	pubA.mu.Unlock()
	_, err := e.db.Pool.Exec(t.Context(), `UPDATE `+relaytest.LogName+`_cursors
		SET token = gen_random_uuid(), lease_until = now() + interval '1 hour'`)
	require.NoError(t, err)
	require.ErrorIs(t, <-errs, store.ErrLeaseLost)
	stopA()
	require.NoError(t, <-resA)
	events, keys := e.parkedRows(t, "bad")
	require.Equal(t, 2, events, "nothing recorded by a")
	require.Equal(t, 1, keys)

	_, err = e.db.Pool.Exec(t.Context(), `UPDATE `+relaytest.LogName+`_cursors SET token = NULL, lease_until = NULL`)
	require.NoError(t, err)
	pubB := newFake()
	settled := make(chan read.SettleStats, 100)
	e.runReader(t, pubB, read.Config{Owner: "b", RequestsEvery: 1, OnSettle: func(s read.SettleStats) { settled <- s }})
	require.Equal(t, read.SettleStats{Replayed: 2, Unparked: 1}, <-settled)
	waitPublished(t, pubB, 3)
	require.Equal(t, append(parked, next...), publishedIDs(pubB))
	events, keys = e.parkedRows(t, "bad")
	require.Zero(t, events)
	require.Zero(t, keys)

	relaytest.Emit(t, e.db.Pool, "bad", 1)
	waitPublished(t, pubB, 4)
	require.Len(t, pubB.snapshot(), 4, "the replay was carried out once")
	require.Empty(t, settled)
}

// TestRequestOnAKeyNotParkedIsCleared: a request on a key the reader has
// not parked (a row it did not write) is cleared, nothing else.
func TestRequestOnAKeyNotParkedIsCleared(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newFake()
	settled := make(chan read.SettleStats, 100)
	e.runReader(t, pub, read.Config{PollInterval: 5 * time.Millisecond, OnSettle: func(s read.SettleStats) { settled <- s }})
	relaytest.Emit(t, e.db.Pool, "k", 1)
	waitPublished(t, pub, 1) // the reader holds the group and read its parked keys
	_, err := e.db.Pool.Exec(t.Context(), `INSERT INTO `+relaytest.LogName+`_parked_keys (grp, key, replay_requested_at)
		VALUES ('g', 'ghost', now())`)
	require.NoError(t, err)
	require.Equal(t, read.SettleStats{Cleared: 1}, <-settled)
	var requested *time.Time
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT replay_requested_at FROM `+relaytest.LogName+`_parked_keys
		WHERE grp = 'g' AND key = 'ghost'`).Scan(&requested))
	require.Nil(t, requested)
}
