package emitter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// endMarker is the payload of the NOTIFY a test sends after its
// transactions, so that the listener knows it has seen everything before.
const endMarker = "end-of-test"

func TestEmitNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DisableNotifySendsNone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{DisableNotify: true})
		listener := b.listen(t)
		b.emitAndEnd(t, true, 1, validEvent())
		require.Equal(t, 0, b.countNotifications(t, listener))
	})

	t.Run("NoneBeforeCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{})
		listener := b.listen(t)
		tx := b.begin(t)
		_, err := b.emitter.Emit(ctx, tx, validEvent())
		require.NoError(t, err)
		b.notifyEnd(t)
		require.Equal(t, 0, b.countNotifications(t, listener), "delivered before commit")
		require.NoError(t, tx.Commit(ctx))
		b.notifyEnd(t)
		require.Equal(t, 1, b.countNotifications(t, listener))
	})

	t.Run("NoneForRollback", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{})
		listener := b.listen(t)
		b.emitAndEnd(t, false, 2, validEvent(), validEvent())
		require.Equal(t, 0, b.countNotifications(t, listener))
	})

	t.Run("OneForCopyBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{})
		listener := b.listen(t)
		b.emitAndEnd(t, true, 1, manyEvents(5000, 0)...)
		require.Equal(t, 1, b.countNotifications(t, listener))
	})

	t.Run("OnePerCommittedTransactionWithoutInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{NotifyEveryEmit: true})
		listener := b.listen(t)
		b.emitAndEnd(t, true, 2, validEvent(), validEvent())
		require.Equal(t, 1, b.countNotifications(t, listener))

		b.emitAndEnd(t, true, 1, validEvent())
		require.Equal(t, 1, b.countNotifications(t, listener))
	})

	t.Run("FailedEmitGivesItsNotifyBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{NotifyInterval: 10 * time.Second})
		listener := b.listen(t)
		quiet := newEmitter(t, b.db, emitter.Config{DisableNotify: true})
		tx := b.begin(t)
		ids, err := quiet.Emit(ctx, tx, validEvent())
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		dup := validEvent()
		dup.ID = ids[0] // the primary key rejects it: this Emit, the interval's first, fails
		tx = b.begin(t)
		_, err = b.emitter.Emit(ctx, tx, dup)
		require.Error(t, err)
		require.NoError(t, tx.Rollback(ctx))

		b.emitAndEnd(t, true, 1, validEvent())
		require.Equal(t, 1, b.countNotifications(t, listener), "the failed Emit gave its notify back")
	})

	t.Run("NoneWithinNotifyInterval", func(t *testing.T) {
		t.Parallel()
		const interval = 300 * time.Millisecond
		b := setup(t, emitter.Config{NotifyInterval: interval})
		listener := b.listen(t)
		start := time.Now()
		b.emitAndEnd(t, true, 1, validEvent())
		require.Equal(t, 1, b.countNotifications(t, listener), "the first Emit notifies")
		b.emitAndEnd(t, true, 1, validEvent())
		if time.Since(start) >= interval {
			t.Skip("the machine was too slow to emit twice within the interval")
		}
		require.Equal(t, 0, b.countNotifications(t, listener), "the second Emit came within the interval")

		time.Sleep(interval)
		b.emitAndEnd(t, true, 1, validEvent())
		require.Equal(t, 1, b.countNotifications(t, listener), "the interval has passed")

		other := &testBundle{db: b.db, emitter: newEmitter(t, b.db, emitter.Config{NotifyInterval: interval})}
		other.emitAndEnd(t, true, 1, validEvent())
		require.Equal(t, 1, b.countNotifications(t, listener), "each Emitter keeps its own interval")
	})

	t.Run("OneOfConcurrentCallsWithinInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, emitter.Config{NotifyInterval: 10 * time.Second})
		listener := b.listen(t)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				tx, err := b.db.Pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if _, err := b.emitter.Emit(ctx, tx, validEvent()); err != nil {
					t.Error(err)
					return
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		b.notifyEnd(t)
		require.Equal(t, 1, b.countNotifications(t, listener))
	})
}

// channel is the default notify channel of the bundle's outbox.
func (b *testBundle) channel() string {
	return sqlname.Names{Table: b.db.Table()}.Channel()
}

// listen opens a connection listening on the outbox's channel.
func (b *testBundle) listen(t *testing.T) *pgx.Conn {
	t.Helper()
	conn := b.db.Conn(t)
	_, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{b.channel()}.Sanitize())
	require.NoError(t, err)
	return conn
}

// emitAndEnd runs one transaction with calls Emit calls of events, commits
// or rolls it back, then sends the end marker.
func (b *testBundle) emitAndEnd(t *testing.T, commit bool, calls int, events ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx := b.begin(t)
	for range calls {
		_, err := b.emitter.Emit(ctx, tx, events...)
		require.NoError(t, err)
	}
	if commit {
		require.NoError(t, tx.Commit(ctx))
	} else {
		require.NoError(t, tx.Rollback(ctx))
	}
	b.notifyEnd(t)
}

// notifyEnd sends the end marker on the outbox's channel.
func (b *testBundle) notifyEnd(t *testing.T) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, b.channel(), endMarker)
	require.NoError(t, err)
}

// countNotifications reads notifications up to the end marker and returns
// how many came from Emit. PostgreSQL delivers notifications in commit
// order, so the marker comes after every earlier commit's notification.
func (b *testBundle) countNotifications(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	ctx := testctx.New(t)
	n := 0
	for {
		msg, err := conn.WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, b.channel(), msg.Channel)
		if msg.Payload == endMarker {
			return n
		}
		require.Empty(t, msg.Payload)
		n++
	}
}
