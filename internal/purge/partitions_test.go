package purge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestSpan(t *testing.T) {
	t.Parallel()
	for retain, want := range map[time.Duration]time.Duration{
		0: 30 * day, time.Minute: time.Minute, 20 * time.Minute: 5 * time.Minute, time.Hour: 15 * time.Minute,
		3 * time.Hour: 15 * time.Minute, 4 * time.Hour: time.Hour, 24 * time.Hour: 6 * time.Hour,
		4 * day: day, 27 * day: day, 28 * day: 7 * day, 90 * day: 7 * day, 119 * day: 7 * day, 120 * day: 30 * day,
		365 * day: 30 * day, 100 * 365 * day: 30 * day,
	} {
		require.Equal(t, want, purge.Span(retain), "retain %s", retain)
	}
	// At most 32 partitions per retention, up to 960 days of it (30 days
	// being the longest span), so that a look-up by id locks few of them.
	for retain := time.Minute; retain <= 960*day; retain += retain / 7 {
		require.LessOrEqual(t, retain/purge.Span(retain), time.Duration(32), "retain %s", retain)
	}
}

const day = 24 * time.Hour

// The missing ranges: one for the past gap up to floor(now, span), then
// one per span; existing partitions (of another span too) cut them.
func TestPlanRanges(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return time.Date(2026, 3, 1, h, m, 0, 0, time.UTC) }
	now := at(10, 20)
	got := purge.PlanRanges(nil, time.Hour, at(3, 30), now, now.Add(2*time.Hour))
	require.Equal(t, []purge.Partition{{From: at(3, 0), To: at(10, 0)}, {From: at(10, 0), To: at(11, 0)},
		{From: at(11, 0), To: at(12, 0)}, {From: at(12, 0), To: at(13, 0)}}, got)
	existing := []purge.Partition{{From: at(5, 0), To: at(6, 0)}, {From: at(10, 0), To: at(10, 15)}, {From: at(11, 30), To: at(13, 0)}}
	got = purge.PlanRanges(existing, time.Hour, at(3, 30), now, now.Add(2*time.Hour))
	require.Equal(t, []purge.Partition{{From: at(3, 0), To: at(5, 0)}, {From: at(6, 0), To: at(10, 0)},
		{From: at(10, 15), To: at(11, 0)}, {From: at(11, 0), To: at(11, 30)}}, got)
	require.Equal(t, []purge.Partition{{From: at(11, 0), To: at(11, 30)}}, purge.PlanRanges(existing[2:], time.Hour, at(11, 40), at(11, 40), at(12, 50)))
	require.Empty(t, purge.PlanRanges([]purge.Partition{{From: at(11, 0), To: at(13, 0)}}, time.Hour, at(11, 40), at(11, 40), at(12, 50)))
	// A past gap longer than MaxRange is cut into ranges of MaxRange
	// (what the partition function accepts).
	got = purge.PlanRanges(nil, time.Hour, now.Add(-70*24*time.Hour), now, now)
	require.Equal(t, []purge.Partition{{From: at(10, 0).Add(-70 * 24 * time.Hour), To: at(10, 0).Add(-70*24*time.Hour + purge.MaxRange)},
		{From: at(10, 0).Add(-70*24*time.Hour + purge.MaxRange), To: at(10, 0).Add(-70*24*time.Hour + 2*purge.MaxRange)},
		{From: at(10, 0).Add(-70*24*time.Hour + 2*purge.MaxRange), To: at(10, 0)}, {From: at(10, 0), To: at(11, 0)}}, got)
}

// fixture is a migrated outbox with its names.
type fixture struct {
	db    *testdb.DB
	names sqlname.Names
}

func newFixture(t *testing.T) fixture {
	db := testdb.NewMigrated(t)
	names, err := sqlname.For(db.Table())
	require.NoError(t, err)
	return fixture{db: db, names: names}
}

// now is the database clock.
func (f fixture) now(t *testing.T) time.Time {
	var now time.Time
	require.NoError(t, f.db.Pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

// partitions lists the history's time partitions.
func (f fixture) partitions(t *testing.T) []purge.Partition {
	parts, err := purge.Partitions(context.Background(), f.db.Pool, f.names)
	require.NoError(t, err)
	for i := range parts {
		parts[i].From, parts[i].To = parts[i].From.UTC(), parts[i].To.UTC()
	}
	return parts
}

// insertSent commits n SENT rows into the history with sent_at at.
func (f fixture) insertSent(t *testing.T, at time.Time, n int) {
	_, err := f.db.Pool.Exec(context.Background(), `INSERT INTO outbox_events_sent (id, seq, event_type, status, sent_at, payload)
SELECT gen_random_uuid(), i, 'history.test', 'SENT', $1, '\x7b7d' FROM generate_series(1, $2) AS i`, at, n)
	require.NoError(t, err)
}

// where counts the history's rows by the partition that holds them.
func (f fixture) where(t *testing.T) map[string]int {
	rows, err := f.db.Pool.Query(context.Background(), `SELECT tableoid::regclass::text, count(*) FROM outbox_events_sent GROUP BY 1`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		require.NoError(t, rows.Scan(&name, &n))
		out[name] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// EnsurePartitions creates the partitions from floor(now, span) to now +
// ahead, named by their start, once: a second call creates none; from a
// time in the past it adds one partition for the whole past; rows land
// in the partition of their sent_at.
func TestEnsurePartitionsCreatesAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	n, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, 3*time.Hour)
	require.NoError(t, err)
	parts := f.partitions(t)
	require.Len(t, parts, n)
	start := now.UTC().Truncate(time.Hour)
	for i, p := range parts {
		require.Equal(t, start.Add(time.Duration(i)*time.Hour), p.From)
		require.Equal(t, p.From.Add(time.Hour), p.To)
		require.Equal(t, f.names.Partition(p.From), p.Name)
	}
	require.False(t, parts[len(parts)-1].To.Before(now.Add(3*time.Hour)), "covers now + ahead")
	require.LessOrEqual(t, len(parts), 4)

	again, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, 3*time.Hour)
	require.NoError(t, err)
	require.Zero(t, again)

	past, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, now.Add(-50*time.Hour), 3*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, past)
	require.Equal(t, purge.Partition{Name: f.names.Partition(now.Add(-50 * time.Hour).UTC().Truncate(time.Hour)),
		From: now.Add(-50 * time.Hour).UTC().Truncate(time.Hour), To: start}, f.partitions(t)[0])

	f.insertSent(t, now, 2)
	f.insertSent(t, now.Add(-30*time.Hour), 3)
	f.insertSent(t, now.Add(-60*time.Hour), 1)
	require.Equal(t, map[string]int{f.names.Partition(start): 2, f.names.Partition(now.Add(-50 * time.Hour).UTC().Truncate(time.Hour)): 3,
		"outbox_events_sent_default": 1}, f.where(t))
}

// A range for which the default partition already holds a row (a
// completion that found no partition) is left out, not an error; the
// others are created.
func TestEnsurePartitionsStepsAroundDefaultRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	f.insertSent(t, now.Add(2*time.Hour), 1)
	_, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, 4*time.Hour)
	require.NoError(t, err)
	taken := now.Add(2 * time.Hour).UTC().Truncate(time.Hour)
	for _, p := range f.partitions(t) {
		require.NotEqual(t, taken, p.From, "a partition over the default partition's row")
	}
	require.GreaterOrEqual(t, len(f.partitions(t)), 4)
	require.Equal(t, map[string]int{"outbox_events_sent_default": 1}, f.where(t))
}

// RetireHistory drops the partitions whose whole range is before the
// cut-off, with their rows (counted), and keeps the others and the
// default partition's rows.
func TestRetireHistoryDropsDuePartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	_, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, now.Add(-50*time.Hour), 3*time.Hour)
	require.NoError(t, err)
	before := len(f.partitions(t))
	f.insertSent(t, now.Add(-30*time.Hour), 3)
	f.insertSent(t, now, 4)
	f.insertSent(t, now.Add(2*time.Hour), 5)
	f.insertSent(t, now.Add(-90*time.Hour), 6) // default

	cut := now.UTC().Truncate(time.Hour).Add(time.Hour)
	ret, err := purge.RetireHistory(ctx, f.db.Pool, f.names, cut)
	require.NoError(t, err)
	require.Equal(t, purge.Retired{Partitions: 2, Rows: 7}, ret)
	parts := f.partitions(t)
	require.Len(t, parts, before-2)
	for _, p := range parts {
		require.True(t, p.To.After(cut), "%s left", p.Name)
	}
	require.Equal(t, map[string]int{f.names.Partition(now.Add(2 * time.Hour).UTC().Truncate(time.Hour)): 5, "outbox_events_sent_default": 6}, f.where(t))
	var tables int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace
		AND relname LIKE 'outbox\_events\_s2%' AND relkind = 'r'`, f.db.Schema).Scan(&tables))
	require.Equal(t, len(parts), tables, "dropped, not only detached")

	again, err := purge.RetireHistory(ctx, f.db.Pool, f.names, cut)
	require.NoError(t, err)
	require.Zero(t, again.Partitions)
}

// While a transaction holds the history, a retirement queues at most
// purge.LockTimeout for its lock, then gives up with ErrBusy and drops
// nothing; the next call drops.
func TestRetireHistoryGivesUpOnALockedHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	_, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, time.Hour)
	require.NoError(t, err)
	reader, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	_, err = reader.Exec(ctx, `SELECT count(*) FROM outbox_events_sent`)
	require.NoError(t, err)
	ret, err := purge.RetireHistory(ctx, f.db.Pool, f.names, now.Add(10*time.Hour))
	require.ErrorIs(t, err, purge.ErrBusy)
	require.Zero(t, ret.Partitions)
	require.NoError(t, reader.Rollback(ctx))
	ret, err = purge.RetireHistory(ctx, f.db.Pool, f.names, now.Add(10*time.Hour))
	require.NoError(t, err)
	require.NotZero(t, ret.Partitions)
	require.Empty(t, f.partitions(t))
}

// A detach left pending (a DETACH … CONCURRENTLY cancelled while it
// waited for a reader, as a crash leaves it; possible only without a
// default partition) is dropped when it is due, with the partitions due
// after it.
func TestRetireHistoryFinalizesAPendingDetach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	_, err := f.db.Pool.Exec(ctx, `DROP TABLE outbox_events_sent_default`)
	require.NoError(t, err)
	now := f.now(t)
	_, err = purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, 2*time.Hour)
	require.NoError(t, err)
	parts := f.partitions(t)
	require.GreaterOrEqual(t, len(parts), 2)
	f.insertSent(t, now, 3)

	reader, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	_, err = reader.Exec(ctx, `SELECT count(*) FROM outbox_events_sent`)
	require.NoError(t, err)
	detacher := f.db.Conn(t)
	pid := detacher.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := detacher.Exec(ctx, `ALTER TABLE outbox_events_sent DETACH PARTITION `+parts[0].Name+` CONCURRENTLY`)
		done <- err
	}()
	testctx.Await(t, "the detach to wait for the reader", func() bool {
		var waiting bool
		require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`,
			pid).Scan(&waiting))
		return waiting
	})
	_, err = f.db.Pool.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid)
	require.NoError(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(<-done, &pgErr), "the detach was cancelled")
	require.NoError(t, reader.Rollback(ctx))
	pending := f.partitions(t)
	require.True(t, pending[0].Pending, "a pending detach")

	ret, err := purge.RetireHistory(ctx, f.db.Pool, f.names, parts[1].To)
	require.NoError(t, err)
	require.Equal(t, purge.Retired{Partitions: 2, Rows: 3}, ret)
	left := f.partitions(t)
	require.Len(t, left, len(parts)-2)
	for _, p := range left {
		require.False(t, p.Pending)
	}
	var tables int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace
		AND relname LIKE 'outbox\_events\_s2%' AND relkind = 'r'`, f.db.Schema).Scan(&tables))
	require.Equal(t, len(left), tables, "dropped, not only detached")
}

// Rows in the default partition are deleted in batches once older than
// the retention (SENT batches of Store.Delete); the time partitions'
// rows are not touched.
func TestDeleteDefaultPartitionRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	_, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, time.Hour)
	require.NoError(t, err)
	f.insertSent(t, now.Add(-48*time.Hour), 7) // default
	f.insertSent(t, now.Add(-2*time.Hour), 2)  // default, young
	f.insertSent(t, now, 3)                    // a time partition
	s := purge.New(f.names)
	p := purge.Params{Status: outbox.StatusSent, OlderThan: 24 * time.Hour, Limit: 5}
	n, err := s.Count(ctx, f.db.Pool, p)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	var deleted []int64
	for {
		res, err := s.Delete(ctx, f.db.Pool, p)
		require.NoError(t, err)
		deleted = append(deleted, res.Deleted)
		if res.Deleted < int64(p.Limit) {
			break
		}
		p.After = res.Last
	}
	require.Equal(t, []int64{5, 2}, deleted)
	require.Equal(t, map[string]int{"outbox_events_sent_default": 2, f.names.Partition(now.UTC().Truncate(time.Hour)): 3}, f.where(t))
}

// Creating a partition does not wait for an open completion (a
// transaction that inserted into the history holds ROW EXCLUSIVE on it;
// ATTACH needs only SHARE UPDATE EXCLUSIVE). A retirement that queues
// behind a reader of the history holds a completion up for at most
// about LockTimeout, then gives up: the completion goes through while
// the reader is still open.
func TestPartitionWorkHoldsCompletionsUpBriefly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	_, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, time.Hour)
	require.NoError(t, err)

	completion, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = completion.Rollback(ctx) }()
	_, err = completion.Exec(ctx, `INSERT INTO outbox_events_sent (id, seq, event_type, sent_at) VALUES (gen_random_uuid(), 1, 'x', now())`)
	require.NoError(t, err)
	created, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Hour, time.Time{}, 5*time.Hour)
	require.NoError(t, err, "created while a completion is open")
	require.NotZero(t, created)
	require.NoError(t, completion.Commit(ctx))

	reader, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	_, err = reader.Exec(ctx, `SELECT count(*) FROM outbox_events_sent`)
	require.NoError(t, err)
	// The retirement's DETACH queues for at most LockTimeout: catch it
	// queued (a few tries, should a loaded machine miss the window), then
	// complete an event behind it.
	var took time.Duration
	for try := 0; took == 0 && try < 5; try++ {
		retired := make(chan error, 1)
		go func() {
			_, err := purge.RetireHistory(ctx, f.db.Pool, f.names, now.Add(10*time.Hour))
			retired <- err
		}()
		queued := false
		for !queued && len(retired) == 0 {
			require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%sent\_drop"(%' AND query LIKE '%' || $1 || '%')`, f.db.Schema).Scan(&queued))
		}
		start := time.Now()
		_, err = f.db.Pool.Exec(ctx, `INSERT INTO outbox_events_sent (id, seq, event_type, sent_at) VALUES (gen_random_uuid(), 2, 'x', now())`)
		require.NoError(t, err, "a completion while a retirement queues behind a reader")
		if queued {
			took = time.Since(start)
		}
		require.ErrorIs(t, <-retired, purge.ErrBusy)
	}
	require.NotZero(t, took, "never caught the retirement queued")
	t.Logf("a completion behind the queued retirement took %s (LockTimeout %s)", took, purge.LockTimeout)
	var open bool
	require.NoError(t, reader.QueryRow(ctx, `SELECT true`).Scan(&open), "the reader is still open")
}

// A partition another replica dropped after this one listed the
// partitions is skipped, not an error (two retirements at once drop
// each partition once between them). A retirement that found the history
// busy (the other held the lock past LockTimeout, on a loaded machine)
// tries again, as the retention job's next pass does.
func TestRetireHistoryTwoAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	now := f.now(t)
	_, err := purge.EnsurePartitions(ctx, f.db.Pool, f.names, time.Minute, time.Time{}, 30*time.Minute)
	require.NoError(t, err)
	total := len(f.partitions(t))
	results := make(chan purge.Retired, 2)
	for range 2 {
		go func() {
			var sum purge.Retired
			for {
				ret, err := purge.RetireHistory(ctx, f.db.Pool, f.names, now.Add(time.Hour))
				sum.Partitions += ret.Partitions
				if !errors.Is(err, purge.ErrBusy) {
					assert.NoError(t, err)
					break
				}
			}
			results <- sum
		}()
	}
	a, b := <-results, <-results
	require.Equal(t, total, a.Partitions+b.Partitions)
	require.Empty(t, f.partitions(t))
}

// The partition functions take only times and check them: a range that
// is empty, longer than 31 days or not in whole minutes is refused
// (22023), a partition already there is reported, not created twice, and
// the drop never touches the default partition.
func TestPartitionFunctionsCheckTheirInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	add := `SELECT ` + f.names.Function(sqlname.SuffixSentAdd) + `($1, $2)`
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range [][2]time.Time{
		{from, from}, {from.Add(time.Hour), from}, {from, from.Add(32 * 24 * time.Hour)},
		{from.Add(time.Second), from.Add(time.Hour)}, {from, from.Add(time.Hour + time.Millisecond)},
	} {
		var created bool
		err := f.db.Pool.QueryRow(ctx, add, r[0], r[1]).Scan(&created)
		require.Equal(t, "22023", pgerr.Code(err), "range %v", r)
	}
	for want, try := true, 0; try < 2; want, try = false, try+1 {
		var created bool
		require.NoError(t, f.db.Pool.QueryRow(ctx, add, from, from.Add(31*24*time.Hour)).Scan(&created))
		require.Equal(t, want, created)
	}
	require.Equal(t, []purge.Partition{{Name: f.names.Partition(from), From: from, To: from.Add(31 * 24 * time.Hour)}}, f.partitions(t))

	var dropped int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+f.names.Function(sqlname.SuffixSentDrop)+`('infinity')`).Scan(&dropped))
	require.Equal(t, 1, dropped)
	require.Empty(t, f.partitions(t))
	var hasDefault bool
	require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`,
		f.names.Table.Schema+"."+f.names.Object(sqlname.SuffixSentDefault)).Scan(&hasDefault))
	require.True(t, hasDefault, "the default partition stays")
}
