package admin

import (
	"cmp"
	"context"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/internal/purge"
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
	// that are not dead letters (or do not exist, or are locked by another
	// replay, or whose id the outbox table holds too) are reported as
	// skipped and left alone. When IDs is set the
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
	// rows without one last), then oldest seq first: the dead letters'
	// code index's order, so that each batch reads only the rows it
	// replays. Defaults
	// to [DefaultReplayLimit]. A filter with every field empty replays
	// any FAILED rows, up to Limit.
	Limit int
	// DryRun makes Replay change nothing and send no notification: it
	// reports the rows the same call would replay now (read without
	// locks, so a concurrent writer may change the answer).
	DryRun bool
	// Actor, when set, audits the replay: its audit row (see
	// [Admin.AuditLog]) commits in the replay's transaction. Ignored
	// with DryRun. Nil: not audited.
	Actor *Actor
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
// until the retention pass has moved it. With p.Actor the same
// transaction inserts the replay's audit row (the rows replayed, even
// none). Bad params give an [*outbox.InputError] and write nothing.
func (a *Admin) Replay(ctx context.Context, p ReplayParams) (ReplayResult, error) {
	stmt, args, err := a.replayArgs(p)
	if err != nil {
		return ReplayResult{}, err
	}
	if err := checkActor(p.Actor); err != nil {
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
	act := audited{actor: p.Actor, action: ActionReplay, filter: p.auditFilter()}
	err = a.inTx(ctx, act, func(tx pgx.Tx) (int64, error) {
		rows, err := tx.Query(ctx, stmt.run, args...)
		if err != nil {
			return 0, err
		}
		if res, err = replayed(rows); err != nil || len(res.Replayed) == 0 {
			return 0, err
		}
		_, err = tx.Exec(ctx, a.sql.notify, a.channel)
		return int64(len(res.Replayed)), err
	})
	if err != nil {
		return ReplayResult{}, errtext.Wrap(err, "admin: replay %s", a.table)
	}
	res.Skipped = skipped(p.IDs, res.Replayed)
	return res, nil
}

// auditFilter is what the audit row of a replay with p records: the ids
// named (idsFilter), or the filter fields given and the limit.
func (p ReplayParams) auditFilter() map[string]any {
	if len(p.IDs) > 0 {
		return idsFilter(p.IDs)
	}
	f := map[string]any{"limit": cmp.Or(p.Limit, DefaultReplayLimit)}
	if p.Type != "" {
		f["type"] = p.Type
	}
	if p.Code != "" {
		f["code"] = p.Code
	}
	if !p.FailedBefore.IsZero() {
		f["failed_before"] = p.FailedBefore.UTC()
	}
	return f
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
		return a.sql.replayIDs, []any{pgvalue.UUIDs(p.IDs), len(p.IDs)}, nil
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
	// Limit is the most rows this call deletes one by one (dead letters,
	// or rows of the history's default partition), 1 to [MaxPurgeLimit].
	// Defaults to [DefaultPurgeLimit]. The history's time partitions that
	// a SENT purge retires go whole, whatever their rows (see
	// [Admin.Purge]).
	Limit int
	// DryRun makes Purge delete nothing and return how many rows the same
	// call would delete now (counted without locks).
	DryRun bool
	// Actor, when set, audits the purge: its audit row (see
	// [Admin.AuditLog]) commits in the purge's transaction. Ignored with
	// DryRun. Nil: not audited.
	Actor *Actor
}

// Purge deletes up to p.Limit rows in p.Status that reached it more than
// p.OlderThan ago (database clock), and returns how many it deleted. Call
// it again while it returns p.Limit or more to drain a larger backlog.
// Bad params give an [*outbox.InputError] and delete nothing.
//
// FAILED rows are deleted from the dead letters in one bounded DELETE
// that skips rows other transactions have locked, oldest failed_at
// first, through their time index: a call reads about the rows it
// deletes.
//
// SENT rows are never deleted one by one from the history's time
// partitions: Purge deletes up to p.Limit rows of the default partition,
// where only rows that found no time partition land (read whole: it has
// no index on sent_at, and the retention pass keeps it small), then
// retires every time partition whose whole range is older than the
// cut-off (purge.RetireHistory: DETACH and DROP, each
// queueing at most purge.LockTimeout for the history's lock; whole
// partitions, however many rows they hold, Limit not applying), counting
// their rows. On an error it returns the rows deleted so far. A
// partition that reaches past the cut-off is kept whole, so a SENT row
// may outlive OlderThan by a partition's span (the dispatcher's
// RetainSent decides it). The dry run counts the default partition's
// rows and estimates the retired partitions' (pg_class).
//
// A stray (a SENT or FAILED row still in the outbox table,
// Counts.Unmoved) is not purged: the retention pass moves it first.
//
// With p.Actor (and not DryRun) the purge is audited. A FAILED purge runs
// in one transaction with its audit row. A SENT purge runs step by step,
// as without an Actor, each step in a short transaction of its own with
// its own audit row: each retired partition, oldest first (its row's
// filter names the partition's upper bound, "up_to", and the request
// under "request"; its request_id is NULL, since the unique index allows
// one row per request), then the default partition's batch, whose row
// carries Actor.RequestID. A request already recorded deletes nothing
// and returns ErrAlreadyDone; one that failed partway has recorded none,
// so posting it again carries on with what is left. So the history's ACCESS EXCLUSIVE
// lock is held for one partition's DETACH and DROP at a time, and
// completions write the history between steps. On an error the
// committed steps stay, each with its audit row, and it returns their
// rows; a FAILED purge returns 0 (rolled back).
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
	if err := checkActor(p.Actor); err != nil {
		return 0, err
	}
	dry := ""
	if p.DryRun {
		dry = " (dry run)"
	}
	batch := purge.Params{Status: p.Status, OlderThan: p.OlderThan, Limit: limit}
	var n int64
	if p.DryRun || p.Actor == nil {
		n, err = a.purgeOn(ctx, a.db, batch, p.DryRun)
	} else {
		n, err = a.purgeAudited(ctx, batch, p.Actor)
	}
	if err != nil {
		return n, errtext.Wrap(err, "admin: purge %s %s%s", p.Status, a.table, dry)
	}
	return n, nil
}

// purgeAudited runs batch with actor's audit rows: in one transaction
// for FAILED rows; for SENT rows a step per transaction, each with its
// audit row (see Purge): first the retired partitions, then the default
// partition's batch, whose row alone carries the request id. A purge that
// fails partway has recorded no request id, so the same request posted
// again carries on with what is left; one that finished is done (a
// request already recorded is refused before any step). It returns the
// rows its committed steps deleted.
func (a *Admin) purgeAudited(ctx context.Context, batch purge.Params, actor *Actor) (int64, error) {
	filter := map[string]any{"status": batch.Status, "older_than": batch.OlderThan.String(), "limit": batch.Limit}
	var retired int64
	if batch.Status == outbox.StatusSent {
		if err := a.requestDone(ctx, actor); err != nil {
			return 0, err
		}
		var err error
		if retired, err = a.retireAudited(ctx, batch.OlderThan, actor, filter); err != nil {
			return retired, err
		}
	}
	var n int64
	err := a.inTx(ctx, audited{actor: actor, action: ActionPurge, filter: filter}, func(tx pgx.Tx) (rows int64, err error) {
		if batch.Status == outbox.StatusFailed {
			n, err = a.purgeOn(ctx, tx, batch, false)
		} else {
			var res purge.Result
			res, err = a.purge.Delete(ctx, tx, batch)
			n = res.Deleted
		}
		return n, err
	})
	if err != nil {
		return retired, err // the batch rolled back
	}
	return retired + n, nil
}

// requestDone returns an error matching ErrAlreadyDone when actor's
// request id (if any) is recorded already.
func (a *Admin) requestDone(ctx context.Context, actor *Actor) error {
	if actor.RequestID == uuid.Nil {
		return nil
	}
	var done bool
	if err := a.db.QueryRow(ctx, a.sql.auditDone, pgvalue.UUID(actor.RequestID)).Scan(&done); err != nil {
		return a.auditErr(err)
	}
	if done {
		return a.alreadyDone(audited{actor: actor, action: ActionPurge}, nil)
	}
	return nil
}

// retireAudited retires the history's partitions older than olderThan
// one by one, oldest first, each in a transaction of its own with its
// audit row (filter with "up_to" and, when actor has one, "request";
// no request_id), and returns the rows they held.
func (a *Admin) retireAudited(ctx context.Context, olderThan time.Duration, actor *Actor, filter map[string]any) (int64, error) {
	var now time.Time
	if err := a.db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, err
	}
	parts, err := purge.Partitions(ctx, a.db, a.names)
	if err != nil {
		return 0, err
	}
	step := *actor
	step.RequestID = uuid.Nil
	var n int64
	for _, p := range parts {
		if p.To.After(now.Add(-olderThan)) {
			continue
		}
		if a.betweenSteps != nil {
			a.betweenSteps()
		}
		f := maps.Clone(filter)
		f["up_to"] = p.To.UTC()
		if actor.RequestID != uuid.Nil {
			f["request"] = actor.RequestID
		}
		var rows int64
		err := a.inTx(ctx, audited{actor: &step, action: ActionPurge, filter: f}, func(tx pgx.Tx) (int64, error) {
			ret, err := purge.RetireHistory(ctx, tx, a.names, p.To)
			rows = ret.Rows
			return rows, err
		})
		if err != nil {
			return n, err
		}
		n += rows
	}
	return n, nil
}

// purgeOn runs (or with dry counts) batch on db, and for SENT rows
// retires the history's partitions older than the cut-off, returning the
// rows deleted (or that would be). The default partition's batch goes
// first: on a missing table it fails as every other command does
// (relation does not exist). On db a pgx.Tx, each partition's step is a
// savepoint of it.
func (a *Admin) purgeOn(ctx context.Context, db DB, batch purge.Params, dry bool) (int64, error) {
	var n int64
	var err error
	if dry {
		n, err = a.purge.Count(ctx, db, batch)
	} else {
		var res purge.Result
		res, err = a.purge.Delete(ctx, db, batch)
		n = res.Deleted
	}
	if err == nil && batch.Status == outbox.StatusSent {
		var retired int64
		retired, err = a.retireHistory(ctx, db, batch.OlderThan, dry)
		n += retired
	}
	return n, err
}

// retireHistory retires the SENT history's time partitions whose whole
// range ended olderThan before the database's now(), and returns the rows
// they held; with dry, it drops nothing and returns the planner's
// estimate of those rows.
func (a *Admin) retireHistory(ctx context.Context, db DB, olderThan time.Duration, dry bool) (int64, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, err
	}
	before := now.Add(-olderThan)
	if !dry {
		ret, err := purge.RetireHistory(ctx, db, a.names, before)
		return ret.Rows, err
	}
	parts, err := purge.Partitions(ctx, db, a.names)
	if err != nil {
		return 0, err
	}
	var due []string
	for _, p := range parts {
		if !p.To.After(before) {
			due = append(due, pgx.Identifier{a.names.Table.Schema, p.Name}.Sanitize())
		}
	}
	var rows int64
	err = db.QueryRow(ctx, `SELECT coalesce(sum(greatest(reltuples, 0)), 0)::bigint FROM pg_class
		WHERE oid = ANY ($1::text[]::regclass[])`, due).Scan(&rows)
	return rows, err
}
