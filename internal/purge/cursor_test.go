package purge_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// While an old snapshot holds the vacuum horizon back, the index entries
// of the dead letters a drain deleted are not marked dead, and a batch
// that starts at the oldest entry of the dead time index visits every row
// deleted before it. A batch given the previous batch's Result.Last
// starts where that one ended: after 20 batches of 500 (10,000 rows
// deleted), the next batch of one row reads a few buffers with it,
// hundreds without.
func TestBatchStartsWhereThePreviousEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox_events_dead (id, seq, event_type, status, failed_at, payload)
SELECT gen_random_uuid(), i, 'cursor.test', 'FAILED', now() - interval '48 hours' + i * interval '1 second', '\x7b7d'
FROM generate_series(1, 12000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE outbox_events_dead`)
	require.NoError(t, err)
	old := db.Conn(t)
	snap, err := old.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = snap.Rollback(ctx) }()
	_, err = snap.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	_, err = snap.Exec(ctx, `SELECT count(*) FROM outbox_events_dead`) // takes the snapshot
	require.NoError(t, err)

	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	s := purge.New(names)
	p := purge.Params{Status: outbox.StatusFailed, OlderThan: 24 * time.Hour, Limit: 500}
	for range 20 {
		res, err := s.Delete(ctx, db.Pool, p)
		require.NoError(t, err)
		require.EqualValues(t, 500, res.Deleted)
		require.True(t, res.Last.After(p.After))
		p.After = res.Last
	}
	day := (24 * time.Hour).Microseconds()
	batch, _, _ := s.FailedStatements()
	explain := func(after pgtype.Timestamptz) testdb.Plan {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		return testdb.Explain(t, tx, batch, day, 1, after)
	}
	from := explain(pgtype.Timestamptz{Time: p.After, Valid: true})
	oldest := explain(pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true})
	t.Logf("next batch of 1: %v buffers from the last, %v from the oldest", from.Buffers, oldest.Buffers)
	require.Contains(t, from.Indexes, "outbox_events_dead_time_idx", from.Text)
	require.Less(t, from.Buffers, 50.0, from.Text)
	require.Greater(t, oldest.Buffers, 100.0, "the dead rows were not visited: the test shows nothing\n%s", oldest.Text)
}
