package purge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Lister is a Querier that also runs queries of many rows.
type Lister interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// DB is what the history's partition work runs on: a *pgxpool.Pool or a
// *pgx.Conn (not a pgx.Tx: each step is a transaction of its own).
type DB interface {
	Querier
	Lister
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ErrBusy is in the chain of an EnsurePartitions or RetireHistory error
// when a lock was not free within LockTimeout (or a completion raced the
// step): nothing of that step was done, and the next call tries again.
var ErrBusy = errors.New("pgoutbox: purge: the SENT history is busy, try again later")

// LockTimeout bounds how long a step of EnsurePartitions or RetireHistory
// queues for a lock. While a DETACH queues for the history's ACCESS
// EXCLUSIVE lock, completions that insert into the history queue behind
// it: this is the longest a completion waits for the retention.
const LockTimeout = 200 * time.Millisecond

// spans are the time partitions' possible lengths, shortest first; the
// longest is at most MaxRange.
var spans = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour,
	7 * 24 * time.Hour, 30 * 24 * time.Hour}

// Span returns the length of the history's time partitions for a
// retention of retain: the longest of 1m, 5m, 15m, 1h, 6h, 1d, 7d and
// 30d that is at most a quarter of retain (1m below 4m), and 30d when
// retain is zero (kept for ever). So a retention spans at most 32
// partitions (up to 960 days of it; beyond, one per 30 days), and a
// look-up by id, which probes every partition, stays cheap. A partition
// is dropped once its whole range is older than retain, so a SENT row is
// kept between retain and retain + Span.
func Span(retain time.Duration) time.Duration {
	if retain <= 0 {
		return spans[len(spans)-1]
	}
	span := spans[0]
	for _, s := range spans {
		if s <= retain/4 {
			span = s
		}
	}
	return span
}

// Partition is one time partition of the SENT history: its name and the
// range [From, To) of sent_at it holds.
type Partition struct {
	Name     string
	From, To time.Time
	// Pending is set while a DETACH … CONCURRENTLY of it has not finished
	// (pg_inherits.inhdetachpending, left by a cancelled or crashed one).
	Pending bool
}

// partitionsSQL lists the range partitions of the history ($1) with
// their bounds (MINVALUE and MAXVALUE clamped to years 1 and 9999); the
// default partition has no range and is not listed.
const partitionsSQL = `SELECT c.relname, b.lo, b.hi, i.inhdetachpending
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid,
	LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m,
	LATERAL (SELECT greatest(CASE WHEN m[1] = 'MINVALUE' THEN '-infinity' ELSE btrim(m[1], '''') END::timestamptz, '0001-01-01Z'),
		least(CASE WHEN m[2] = 'MAXVALUE' THEN 'infinity' ELSE btrim(m[2], '''') END::timestamptz, '9999-12-31Z')) AS b(lo, hi)
WHERE i.inhparent = $1::regclass AND m IS NOT NULL
ORDER BY b.lo`

// Partitions lists the SENT history's time partitions, oldest first.
func Partitions(ctx context.Context, db Lister, names sqlname.Names) ([]Partition, error) {
	rows, err := db.Query(ctx, partitionsSQL, names.Sent)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Partition, error) {
		var p Partition
		err := r.Scan(&p.Name, &p.From, &p.To, &p.Pending)
		return p, err
	})
}

// lockPartitions serializes the partition work of one history (creation
// and retirement, by any replica or Migrate) for the rest of tx.
const lockPartitions = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

// LockKey is the key of the advisory lock that serializes the partition
// work of the table's history (purge's steps and the partition functions
// of migration 010, which take it too).
func LockKey(names sqlname.Names) string {
	return "pgoutbox.partitions:" + names.Table.String()
}

// beginStep opens a step's transaction: lock_timeout LockTimeout, then
// the history's partition lock.
func beginStep(ctx context.Context, db DB, names sqlname.Names) (pgx.Tx, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err = tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, LockTimeout.Milliseconds())); err == nil {
		_, err = tx.Exec(ctx, lockPartitions, LockKey(names))
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, busy(err)
	}
	return tx, nil
}

// busy adds ErrBusy to a lock timeout's error, and to a check violation
// (a completion put a row of the range into the default partition while
// the step ran).
func busy(err error) error {
	switch pgerr.Code(err) {
	case pgerr.LockNotAvailable, checkViolation:
		return errtext.WrapAs(ErrBusy, err, "")
	}
	return err
}

// checkViolation is SQLSTATE 23514.
const checkViolation = "23514"

// EnsurePartitions creates the SENT history's missing time partitions so
// that every sent_at from from (the database's now() when zero) to now()
// + ahead has one, and returns how many it created. From floor(now(),
// span) on, a partition covers span ([start, start + span), start a
// multiple of span in UTC, named Names.Partition(start)); before it (rows
// moved in by Sweep after an upgrade) each gap between existing
// partitions gets one partition. A range that would overlap an existing
// partition is cut to fit; a range for which the default partition
// already holds rows is left out (those rows stay there until they are
// older than the retention, see DeleteDefault).
//
// Each partition is created in a transaction of its own, as a table
// (LIKE the history) then ATTACH PARTITION: that takes SHARE UPDATE
// EXCLUSIVE on the history, which completions' inserts (ROW EXCLUSIVE)
// and readers do not wait for, and ACCESS EXCLUSIVE on the default
// partition, which it scans (normally empty) and which only statements
// that read the whole history or insert into the default partition
// touch. A step waits at most LockTimeout for a lock; then it returns
// an error wrapping ErrBusy and the next call goes on.
func EnsurePartitions(ctx context.Context, db DB, names sqlname.Names, span time.Duration, from time.Time, ahead time.Duration) (created int, err error) {
	for {
		done, err := ensureOne(ctx, db, names, span, from, ahead)
		if err != nil || done {
			return created, errtext.Wrap(busy(err), "purge: create a partition of %s", names.Sent)
		}
		created++
	}
}

// ensureOne creates the first missing partition, under the partition
// lock; done when none is missing.
func ensureOne(ctx context.Context, db DB, names sqlname.Names, span time.Duration, from time.Time, ahead time.Duration) (done bool, err error) {
	tx, err := beginStep(ctx, db, names)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return false, err
	}
	parts, err := Partitions(ctx, tx, names)
	if err != nil {
		return false, err
	}
	if from.IsZero() || from.After(now) {
		from = now
	}
	hasDefault, err := hasDefaultPartition(ctx, tx, names)
	if err != nil {
		return false, err
	}
	for _, r := range planRanges(parts, span, from, now, now.Add(ahead)) {
		taken := false
		if hasDefault {
			if taken, err = defaultHolds(ctx, tx, names, r); err != nil {
				return false, err
			}
		}
		if taken {
			continue
		}
		if err := attach(ctx, tx, names, r); err != nil {
			return false, busy(err)
		}
		return false, busy(tx.Commit(ctx))
	}
	return true, nil
}

// MaxRange is the longest range of a time partition, which the
// history's partition function (<table>_sent_add) accepts.
const MaxRange = 31 * 24 * time.Hour

// planRanges returns the missing ranges, oldest first: [from, until)
// less the existing partitions, cut at the multiples of span from
// floor(now, span) on and before it at most MaxRange long.
func planRanges(parts []Partition, span time.Duration, from, now, until time.Time) []Partition {
	from = from.UTC().Truncate(span)
	present := now.UTC().Truncate(span)
	var out []Partition
	for cur := from; cur.Before(until); {
		next := present
		if !cur.Before(present) {
			next = cur.Truncate(span).Add(span)
		}
		skip := false
		for _, p := range parts {
			if !p.From.After(cur) && p.To.After(cur) { // cur is inside p
				cur, skip = p.To, true
				break
			}
			if p.From.After(cur) && p.From.Before(next) {
				next = p.From
			}
		}
		if skip {
			continue
		}
		if limit := cur.Add(MaxRange); next.After(limit) {
			next = limit
		}
		out = append(out, Partition{From: cur, To: next})
		cur = next
	}
	return out
}

// defaultHolds reports whether the default partition holds a row of r
// (a sequential scan of the default partition, normally empty: no
// partition covers r, so the query, through the history, is pruned to
// the default partition).
func defaultHolds(ctx context.Context, tx pgx.Tx, names sqlname.Names, r Partition) (bool, error) {
	var held bool
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at >= $1 AND sent_at < $2)`,
		names.Sent), r.From, r.To).Scan(&held)
	return held, err
}

// attach creates the partition of r through the history's partition
// function (<table>_sent_add, SECURITY DEFINER: the caller need not own
// the history); a partition of that name already there is left alone.
func attach(ctx context.Context, tx pgx.Tx, names sqlname.Names, r Partition) error {
	var created bool
	return tx.QueryRow(ctx, fmt.Sprintf(`SELECT %s($1, $2)`, names.Function(sqlname.SuffixSentAdd)), r.From, r.To).Scan(&created)
}

// sentDefault is the quoted schema.table of the default partition.
func sentDefault(names sqlname.Names) string {
	return pgx.Identifier{names.Table.Schema, names.Object(sqlname.SuffixSentDefault)}.Sanitize()
}

// Retired is what RetireHistory dropped.
type Retired struct {
	// Partitions is how many time partitions it dropped.
	Partitions int
	// Rows is how many rows they held: counted (count(*)) for a partition
	// of at most 1,024 pages (8 MB), otherwise pg_class.reltuples, the
	// estimate of the last vacuum or analyze (a closed partition is
	// insert-only, so autovacuum's last pass saw it whole).
	Rows int64
}

// RetireHistory drops every time partition of the SENT history whose
// whole range is older than before (upper bound ≤ before), oldest first,
// through the history's partition function (<table>_sent_drop, SECURITY
// DEFINER: the caller need not own the history). Rows of the default
// partition are not its business (DeleteDefault).
//
// Each partition goes in a transaction of its own (PostgreSQL refuses
// DETACH … CONCURRENTLY while the history has a default partition):
// DETACH PARTITION then DROP TABLE, which hold the history's ACCESS
// EXCLUSIVE lock for a few milliseconds, queueing at most LockTimeout
// for it (completions that insert into the history wait behind it
// meanwhile); on a timeout it returns an error wrapping ErrBusy.
func RetireHistory(ctx context.Context, db DB, names sqlname.Names, before time.Time) (Retired, error) {
	var ret Retired
	parts, err := Partitions(ctx, db, names)
	if err != nil {
		return ret, errtext.Wrap(err, "purge: list the partitions of %s", names.Sent)
	}
	// One step per due partition, and one at least (with nothing due, it
	// drops nothing): a role that may not run the function learns it
	// every time, not only when a partition is due.
	ups := []time.Time{before}
	if len(parts) > 0 && !parts[0].To.After(before) {
		ups = nil
		for _, p := range parts {
			if !p.To.After(before) {
				ups = append(ups, p.To)
			}
		}
	}
	for _, up := range ups {
		n, rows, err := dropUpTo(ctx, db, names, up)
		ret.Partitions += n
		ret.Rows += rows
		if err != nil {
			return ret, errtext.Wrap(busy(err), "purge: retire the partitions of %s up to %s", names.Sent, up.UTC().Format(time.RFC3339))
		}
	}
	return ret, nil
}

// dropUpTo drops, in one step, the partitions whose upper bound is at
// most before, returning how many and their rows.
func dropUpTo(ctx context.Context, db DB, names sqlname.Names, before time.Time) (n int, rows int64, err error) {
	tx, err := beginStep(ctx, db, names)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var count, sum int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(sum(row_estimate), 0)::bigint FROM %s($1)`,
		names.Function(sqlname.SuffixSentDrop)), before).Scan(&count, &sum); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	return int(count), sum, nil
}

// hasDefaultPartition reports whether the history has a default partition.
func hasDefaultPartition(ctx context.Context, db Querier, names sqlname.Names) (bool, error) {
	var has bool
	err := db.QueryRow(ctx, `SELECT partdefid <> 0 FROM pg_partitioned_table WHERE partrelid = $1::regclass`, names.Sent).Scan(&has)
	return has, err
}
