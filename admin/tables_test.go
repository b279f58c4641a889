package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Rows still in the outbox table with status SENT or FAILED (strays not
// moved yet) count in Counts.Unmoved only, never in Sent or Failed too,
// and Total counts every row once; Summary agrees and leaves them out of
// its breakdown by type.
func TestCountsUnmovedStrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.insert(t, row{}, row{Status: "PROCESSING"}, row{Status: "SENT"}, row{Status: "SENT"}, row{Status: "FAILED"},
		row{Status: "SENT", Stray: true, Type: "stray"}, row{Status: "FAILED", Stray: true, Type: "stray"},
		row{Status: "SENT", Stray: true, Type: "stray"})
	c, err := b.admin.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, admin.Counts{Pending: 1, Processing: 1, Sent: 2, Failed: 1, Unmoved: 3, Due: 1,
		OldestDueAge: c.OldestDueAge, At: c.At}, c)
	require.Equal(t, int64(8), c.Total())
	s, err := b.admin.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Counts.Unmoved)
	require.Equal(t, c.Total(), s.Counts.Total())
	require.Equal(t, []admin.TypeCounts{{Type: "test.event", Pending: 1, Due: 1, Processing: 1, Sent: 2, Failed: 1}}, s.ByType)
}

// A dead letter whose id the outbox table already holds is not replayed:
// the replay reports it (Conflicts, and Skipped by id), keeps the dead
// letter as it was and leaves the outbox's row alone, and replays the
// others. Its dry run says the same.
func TestReplayConflictKeepsTheDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Status: "FAILED", Code: "timeout"}, row{Status: "FAILED", Code: "timeout"})
	// The first id again in the outbox table, as an event emitted anew.
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_type, next_attempt_at) VALUES ($1, 'again', now() + interval '1 hour')`, ids[0])
	require.NoError(t, err)
	before := b.snapshot(t)

	dry, err := b.admin.Replay(ctx, admin.ReplayParams{Code: "timeout", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[1]}, dry.Replayed)
	require.Equal(t, []uuid.UUID{ids[0]}, dry.Conflicts)
	require.Equal(t, before, b.snapshot(t), "a dry run changes nothing")

	res, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: ids})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[1]}, res.Replayed)
	require.Equal(t, []uuid.UUID{ids[0]}, res.Conflicts)
	require.Equal(t, []uuid.UUID{ids[0]}, res.Skipped)
	require.Equal(t, 1, b.countWhere(t, "id = $1 AND status = 'FAILED' AND last_error_code = 'timeout'", ids[0]), "the dead letter stays")
	require.Equal(t, 1, b.countWhere(t, "id = $1 AND status = 'PENDING' AND event_type = 'again'", ids[0]), "the outbox's row is untouched")
	require.Equal(t, 1, b.countWhere(t, "id = $1", ids[1]), "moved, not copied")
	require.Equal(t, "PENDING", b.status(t, ids[1]))

	res, err = b.admin.Replay(ctx, admin.ReplayParams{Code: "timeout"})
	require.NoError(t, err)
	require.Empty(t, res.Replayed)
	require.Equal(t, []uuid.UUID{ids[0]}, res.Conflicts, "a filter replay meets it again")
	require.Empty(t, res.Skipped)
}

// A replayed dead letter goes back into the outbox table with its id and
// seq, so that it keeps its place in its key's order and in List.
func TestReplayKeepsIDAndSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Status: "FAILED", Aggregate: "a", Attempts: 3}, row{Aggregate: "a"})
	d, err := b.admin.Inspect(ctx, ids[0])
	require.NoError(t, err)
	_, err = b.admin.Replay(ctx, admin.ReplayParams{IDs: ids[:1]})
	require.NoError(t, err)
	var seq int64
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT seq, attempts FROM outbox_events WHERE id = $1`, ids[0]).Scan(&seq, &attempts))
	require.Equal(t, d.Seq, seq)
	require.Zero(t, attempts)
	require.Zero(t, b.countWhere(t, "id = $1 AND status = 'FAILED'", ids[0]))
	page, err := b.admin.List(ctx, admin.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	require.Equal(t, ids, []uuid.UUID{page.Events[0].ID, page.Events[1].ID}, "in seq order")
}

// List reads each status where it lives and merges the tables by seq
// without a status; the strays show under their status. Inspect finds a
// row in each table.
func TestListAndInspectAcrossTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Status: "SENT"}, row{}, row{Status: "FAILED", Code: "timeout"}, row{Status: "PROCESSING"},
		row{Status: "SENT", Stray: true}, row{Status: "FAILED", Stray: true}, row{Status: "SENT", Code: "timeout"})
	var all []uuid.UUID
	p := admin.ListParams{Limit: 2}
	for {
		page, err := b.admin.List(ctx, p)
		require.NoError(t, err)
		for _, r := range page.Events {
			all = append(all, r.ID)
		}
		if page.Next.IsZero() {
			break
		}
		p.After = page.Next
	}
	require.Equal(t, ids, all, "every row once, in seq order, across pages")
	for st, want := range map[outbox.Status][]uuid.UUID{
		outbox.StatusSent: {ids[0], ids[4], ids[6]}, outbox.StatusPending: {ids[1]},
		outbox.StatusFailed: {ids[2], ids[5]}, outbox.StatusProcessing: {ids[3]},
	} {
		page, err := b.admin.List(ctx, admin.ListParams{Status: st})
		require.NoError(t, err)
		var got []uuid.UUID
		for _, r := range page.Events {
			got = append(got, r.ID)
			require.Equal(t, st, r.Status)
		}
		require.Equal(t, want, got, st)
	}
	page, err := b.admin.List(ctx, admin.ListParams{Code: "timeout"})
	require.NoError(t, err)
	require.Len(t, page.Events, 2, "a dead letter and a SENT row retried after the code")
	for i, id := range ids {
		d, err := b.admin.Inspect(ctx, id)
		require.NoError(t, err, i)
		require.Equal(t, id, d.ID)
	}
}

// Purge deletes dead letters and rows of the history's default
// partition, never a stray.
func TestPurgeLeavesStrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.insert(t, row{Status: "SENT", SentAgo: 2 * time.Hour}, row{Status: "FAILED", FailedAgo: 2 * time.Hour},
		row{Status: "SENT", SentAgo: 2 * time.Hour, Stray: true}, row{Status: "FAILED", FailedAgo: 2 * time.Hour, Stray: true})
	for _, st := range []outbox.Status{outbox.StatusSent, outbox.StatusFailed} {
		n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: st, OlderThan: time.Hour})
		require.NoError(t, err)
		require.Equal(t, int64(1), n, st)
	}
	require.Empty(t, b.status(t, ids[0]))
	require.Empty(t, b.status(t, ids[1]))
	require.Equal(t, "SENT", b.status(t, ids[2]))
	require.Equal(t, "FAILED", b.status(t, ids[3]))
}

// Purge of SENT rows retires the history's time partitions that ended
// before the cut-off, whole, counting their rows, keeps the partition
// that reaches past it, and deletes the default partition's old rows;
// its dry run drops nothing and estimates the retired partitions' rows.
func TestPurgeSentRetiresPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	names, err := sqlname.For(b.db.Table())
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT date_trunc('hour', now())`).Scan(&now))
	for _, h := range []int{-4, -3, 0} {
		start := now.Add(time.Duration(h) * time.Hour)
		_, err := b.db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			names.QualifiedPartition(start), names.Sent, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339)))
		require.NoError(t, err)
	}
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (seq, id, event_type, sent_at)
		SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 't', date_trunc('hour', now()) - i * interval '1 minute'
		FROM generate_series(121, 240) AS i`) // 120 rows in the two old partitions
	require.NoError(t, err)
	keep := b.insert(t, row{Status: "SENT", SentAgo: 90 * time.Minute}, // the default partition, kept
		row{Status: "SENT"})[1] // the current partition
	old := b.insert(t, row{Status: "SENT", SentAgo: 10 * time.Hour})[0] // the default partition, purged
	_, err = b.db.Pool.Exec(ctx, `ANALYZE outbox_events_sent`)
	require.NoError(t, err)
	before := b.snapshot(t)

	n, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: 2 * time.Hour, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, int64(121), n, "two partitions of 60 rows (estimated) and a row of the default partition")
	require.Equal(t, before, b.snapshot(t))

	n, err = b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: 2 * time.Hour, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, int64(121), n, "whole partitions, whatever the limit, and one row of the default partition")
	require.Empty(t, b.status(t, old))
	require.Equal(t, "SENT", b.status(t, keep))
	require.Equal(t, 2, b.countWhere(t, "status = 'SENT'"))
	var parts int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_events_sent'::regclass`).Scan(&parts))
	require.Equal(t, 2, parts, "the current and the default partitions")
}
