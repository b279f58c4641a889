package admin

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pguuid"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Replay bounds.
const (
	// DefaultReplayLimit is the most rows a filter replay changes when
	// ReplayParams.Limit is 0.
	DefaultReplayLimit = 1000
	// MaxReplayLimit is the most rows one Replay call may change, and the
	// most ids it may name.
	MaxReplayLimit = 10_000
)

// ReplayParams choose the FAILED rows to replay: either by id, or by a
// filter. Only FAILED rows are ever changed.
type ReplayParams struct {
	// IDs names the rows to replay, at most [MaxReplayLimit]. Named rows
	// that are not FAILED (or do not exist, or are locked by another
	// replay) are reported as skipped and left alone. When IDs is set the
	// filter fields and Limit must be empty: the list is the bound.
	IDs []uuid.UUID
	// Type keeps only rows of this event type. Empty means any. It must be
	// valid UTF-8 without NUL.
	Type string
	// Code keeps only rows whose last_error_code is this. Empty means any.
	// It must be valid UTF-8 without NUL.
	Code outbox.Code
	// FailedBefore keeps only rows that failed before this instant, in the
	// years 1 to 9999. Zero means any.
	FailedBefore time.Time
	// Limit is the most rows a filter replay changes, 1 to
	// [MaxReplayLimit]. Rows are taken by error code (last_error_code,
	// rows without one last), then oldest seq first: the failed index's
	// order, so that each batch reads only the rows it replays. Defaults
	// to [DefaultReplayLimit]. A filter with every field empty replays
	// any FAILED rows, up to Limit.
	Limit int
	// DryRun makes Replay change nothing and send no notification: it
	// reports the rows the same call would replay now (read without
	// locks, so a concurrent writer may change the answer).
	DryRun bool
}

// ReplayResult says what Replay changed.
type ReplayResult struct {
	// Replayed are the rows now PENDING, due at once; with
	// ReplayParams.DryRun, the rows that would be.
	Replayed []uuid.UUID `json:"replayed"`
	// Skipped are the ids of ReplayParams.IDs that were not replayed: not
	// a dead letter (missing, or still in the outbox table), locked by a
	// concurrent writer, or a conflict (Conflicts). Always empty for a
	// filter replay.
	Skipped []uuid.UUID `json:"skipped"`
	// Conflicts are the dead letters taken that were not replayed because
	// the outbox table already holds a row with their id (a stray not
	// moved yet, or an event emitted again with the same id): they stay
	// dead letters, unchanged. Normally empty. A filter replay takes
	// them again on its next call (they keep their place in its order).
	Conflicts []uuid.UUID `json:"conflicts,omitempty"`
}

// Replay moves dead letters (FAILED rows) back into the outbox table as
// PENDING rows, with their id and seq, due now by the database clock,
// with attempts, recoveries and snoozes reset to 0 and failed_at cleared,
// so that they get the full retry and snooze budget again.
// last_error_code, last_error and the attempt log are kept as history;
// the next failure appends to the log. It is one bounded statement that
// locks the dead letters with SKIP LOCKED (found through the dead
// letters' code index or primary key: a call costs in proportion to the
// dead letters, never to the history), inserts them into the outbox
// table and deletes those inserted; a dead letter whose id the outbox
// table already holds stays (ReplayResult.Conflicts). In the same
// transaction and only when rows moved, a pg_notify on the table's
// channel wakes dispatchers at once (they poll anyway). A FAILED row
// still in the outbox table (a stray, Counts.Unmoved) is not replayed
// until the retention pass has moved it. Bad params give an
// [*outbox.InputError] and write nothing.
func (a *Admin) Replay(ctx context.Context, p ReplayParams) (ReplayResult, error) {
	stmt, args, err := a.replayArgs(p)
	if err != nil {
		return ReplayResult{}, err
	}
	var res ReplayResult
	if p.DryRun {
		rows, err := a.db.Query(ctx, stmt.dry, args...)
		if err == nil {
			res, err = replayed(rows)
		}
		if err != nil {
			return ReplayResult{}, errtext.Wrap(err, "admin: replay %s (dry run)", a.table)
		}
		res.Skipped = skipped(p.IDs, res.Replayed)
		return res, nil
	}
	err = pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, stmt.run, args...)
		if err != nil {
			return err
		}
		if res, err = replayed(rows); err != nil || len(res.Replayed) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, a.sql.notify, a.channel)
		return err
	})
	if err != nil {
		return ReplayResult{}, errtext.Wrap(err, "admin: replay %s", a.table)
	}
	res.Skipped = skipped(p.IDs, res.Replayed)
	return res, nil
}

// replayed reads a replay's lines (id, moved) into a result: the moved
// ids in Replayed, the others in Conflicts.
func replayed(rows pgx.Rows) (ReplayResult, error) {
	res := ReplayResult{Replayed: []uuid.UUID{}}
	var id uuid.UUID
	var moved bool
	_, err := pgx.ForEachRow(rows, []any{&id, &moved}, func() error {
		if moved {
			res.Replayed = append(res.Replayed, id)
		} else {
			res.Conflicts = append(res.Conflicts, id)
		}
		return nil
	})
	return res, err
}

// replayArgs validates p and picks the statement and its arguments.
func (a *Admin) replayArgs(p ReplayParams) (write, []any, error) {
	if len(p.IDs) > 0 {
		if p.Type != "" || p.Code != "" || !p.FailedBefore.IsZero() || p.Limit != 0 {
			return write{}, nil, inputErr("IDs", "cannot be combined with Type, Code, FailedBefore or Limit")
		}
		if len(p.IDs) > MaxReplayLimit {
			return write{}, nil, inputErr("IDs", "names %d rows, at most %d per call", len(p.IDs), MaxReplayLimit)
		}
		return a.sql.replayIDs, []any{pguuid.ArrayOf(p.IDs), len(p.IDs)}, nil
	}
	if p.IDs != nil {
		return write{}, nil, inputErr("IDs", "is empty; leave it nil to replay by filter")
	}
	if err := cmp.Or(checkText("Type", p.Type), checkText("Code", string(p.Code)), checkTime("FailedBefore", p.FailedBefore)); err != nil {
		return write{}, nil, err
	}
	limit, err := checkLimit(p.Limit, DefaultReplayLimit, MaxReplayLimit)
	if err != nil {
		return write{}, nil, err
	}
	var w where
	w.eq("event_type", p.Type)
	w.eq("last_error_code", string(p.Code))
	if !p.FailedBefore.IsZero() {
		w.conds = append(w.conds, "failed_at < "+w.arg(p.FailedBefore))
	}
	return replayWrite(a.sql.t, a.sql.dead, w.String(), replayFilterOrder, w.arg(limit)), w.args, nil
}

// skipped returns the ids of named that are not in replayed, in the order
// named, once each.
func skipped(named, replayed []uuid.UUID) []uuid.UUID {
	seen := make(map[uuid.UUID]bool, len(named))
	for _, id := range replayed {
		seen[id] = true
	}
	var out []uuid.UUID
	for _, id := range named {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Purge bounds.
const (
	// DefaultPurgeLimit is the most rows one Purge deletes when
	// PurgeParams.Limit is 0.
	DefaultPurgeLimit = 10_000
	// MaxPurgeLimit is the largest PurgeParams.Limit.
	MaxPurgeLimit = 100_000
)

// PurgeParams choose finished rows to delete.
type PurgeParams struct {
	// Status is SENT or FAILED; any other value is an [*outbox.InputError].
	// PENDING and PROCESSING rows are never purged.
	Status outbox.Status
	// OlderThan keeps rows younger than this: a row is purged when its
	// sent_at (SENT) or failed_at (FAILED) is before the database's
	// now() - OlderThan. At least 0.
	OlderThan time.Duration
	// Limit is the most rows this call deletes, 1 to [MaxPurgeLimit].
	// Defaults to [DefaultPurgeLimit].
	Limit int
	// DryRun makes Purge delete nothing and return how many rows the same
	// call would delete now (counted without locks).
	DryRun bool
}

// Purge deletes up to p.Limit rows in p.Status that reached it more than
// p.OlderThan ago (database clock), in one bounded DELETE that skips rows
// other transactions have locked, and returns how many it deleted. Call it
// again while it returns p.Limit to drain a larger backlog; each call is
// its own short statement. Bad params give an [*outbox.InputError] and
// delete nothing.
//
// FAILED rows are deleted from the dead letters, oldest failed_at first,
// through their time index: a call reads about the rows it deletes.
// SENT rows are deleted from the history's default partition, where only
// the rows that found no time partition land (walked in seq order; its
// cost follows that partition, which the retention pass keeps small):
// the time partitions are retired whole by the retention pass (see
// docs/admin.md), never row by row. A stray (a SENT or FAILED row still
// in the outbox table) is not purged: the retention pass moves it first.
func (a *Admin) Purge(ctx context.Context, p PurgeParams) (int64, error) {
	if p.Status != outbox.StatusSent && p.Status != outbox.StatusFailed {
		return 0, inputErr("Status", "is %q, must be SENT or FAILED", p.Status)
	}
	if p.OlderThan < 0 {
		return 0, inputErr("OlderThan", "is %s, must be at least 0", p.OlderThan)
	}
	limit, err := checkLimit(p.Limit, DefaultPurgeLimit, MaxPurgeLimit)
	if err != nil {
		return 0, err
	}
	run, count := a.sql.purgeFailed, a.sql.purgeFailedCount
	if p.Status == outbox.StatusSent {
		run, count = a.sql.purgeSent, a.sql.purgeSentCount
	}
	args := []any{p.OlderThan.Microseconds(), limit}
	if p.DryRun {
		var n int64
		if err := a.db.QueryRow(ctx, count, args...).Scan(&n); err != nil {
			return 0, errtext.Wrap(err, "admin: purge %s %s (dry run)", p.Status, a.table)
		}
		return n, nil
	}
	tag, err := a.db.Exec(ctx, run, args...)
	if err != nil {
		return 0, errtext.Wrap(err, "admin: purge %s %s", p.Status, a.table)
	}
	return tag.RowsAffected(), nil
}
