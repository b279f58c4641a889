package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// MaxSkipIDs is the most ids one SkipHeads call may name.
const MaxSkipIDs = 1000

// ErrNotSkippable is matched (errors.Is) by the [*SkipError] of a
// SkipHeads call that named an event it cannot skip.
var ErrNotSkippable = errors.New("pgoutbox: admin: event cannot be skipped")

// SkipParams names the FAILED events to skip.
type SkipParams struct {
	// IDs names the events, 1 to [MaxSkipIDs] (repeats count once). Every
	// one must be FAILED, or nothing is written.
	IDs []uuid.UUID
	// DryRun makes SkipHeads write nothing and send no notification: it
	// checks the named rows (read without locks) and reports what the same
	// call would skip now, or the *SkipError it would return, except for
	// rows a concurrent writer holds.
	DryRun bool
	// Actor, when set, audits the skip: its audit row (see
	// [Admin.AuditLog]) commits in the skip's transaction. Ignored with
	// DryRun. Nil: not audited.
	Actor *Actor
}

// SkipResult says what SkipHeads skipped.
type SkipResult struct {
	// Skipped are the named ids, once each, in the order named; with
	// SkipParams.DryRun, the ids that would be skipped.
	Skipped []uuid.UUID `json:"skipped"`
	// At is the skipped_at of each row, as Skipped (the database clock);
	// a row skipped by an earlier call keeps its first time. Empty with
	// DryRun.
	At []time.Time `json:"at,omitempty"`
}

// Rejected is a named id that SkipHeads could not skip.
type Rejected struct {
	// ID is the named id.
	ID uuid.UUID `json:"id"`
	// Status is the row's status; empty when no row has the id.
	Status outbox.Status `json:"status,omitempty"`
	// Locked reports that another transaction held the row (a replay,
	// a purge), or that it is a FAILED row not moved to the dead letters
	// yet: try again.
	Locked bool `json:"locked,omitempty"`
}

// String says why the id was rejected: "<id> is PENDING", "<id> not found"
// or "<id> is locked by another transaction".
func (r Rejected) String() string {
	switch {
	case r.Status == "":
		return r.ID.String() + " not found"
	case r.Locked:
		return r.ID.String() + " is locked by another transaction"
	default:
		return r.ID.String() + " is " + string(r.Status) + ", not FAILED"
	}
}

// SkipError is what SkipHeads returns when a named id is not a FAILED
// row it could lock: nothing was written. It matches [ErrNotSkippable].
type SkipError struct {
	// Table is the outbox table.
	Table string
	// Named is how many distinct ids the call named.
	Named int
	// Rejected are the ids that could not be skipped, in the order named.
	Rejected []Rejected
}

// shownRejected is how many rejected ids a SkipError's text names.
const shownRejected = 5

// Error lists the first rejected ids and says that nothing was written.
func (e *SkipError) Error() string {
	parts := make([]string, 0, shownRejected+1)
	for i, r := range e.Rejected {
		if i == shownRejected {
			parts = append(parts, fmt.Sprintf("and %d more", len(e.Rejected)-shownRejected))
			break
		}
		parts = append(parts, r.String())
	}
	return fmt.Sprintf("pgoutbox: admin: skip in %s: %d of %d ids cannot be skipped, nothing was written: %s",
		e.Table, len(e.Rejected), e.Named, strings.Join(parts, "; "))
}

// Unwrap returns ErrNotSkippable.
func (e *SkipError) Unwrap() error { return ErrNotSkippable }

// SkipHeads marks the named FAILED events (dead letters) skipped
// (skipped_at, the database clock), typically the FAILED head of a key that
// [Admin.BlockedKeys] lists: under head policy BlockKey a skipped FAILED
// event no longer holds its key, and the next event of the key is handed
// out. The rows stay FAILED, with their error and attempt log; replaying
// one later clears its skip.
//
// It is all or nothing, in one statement: if any named id is not a dead
// letter, or its row is held by another transaction (never waited for), it
// returns a [*SkipError] listing them and writes nothing. It reads the
// named ids in the dead letters by their primary key, and those not
// there in the outbox table (its primary key) and the history (its id
// index), only to name their status in the error. A FAILED row still in
// the outbox table (a stray) is not skippable until the retention pass
// has moved it: it is rejected as FAILED and locked. In the same
// transaction, when rows were skipped, it sends a pg_notify on the
// table's channel, so that dispatchers go on with the key at once, and
// with p.Actor the skip's audit row. Bad params give an
// [*outbox.InputError] and write nothing.
func (a *Admin) SkipHeads(ctx context.Context, p SkipParams) (SkipResult, error) {
	ids, err := distinctIDs(p.IDs)
	if err == nil {
		err = checkActor(p.Actor)
	}
	if err != nil {
		return SkipResult{}, err
	}
	if p.DryRun {
		rows, err := a.db.Query(ctx, a.sql.skip.dry, pgvalue.UUIDs(ids))
		if err != nil {
			return SkipResult{}, errtext.Wrap(err, "admin: skip in %s (dry run)", a.table)
		}
		return a.skipResult(ids, rows, true)
	}
	var res SkipResult
	act := audited{actor: p.Actor, action: ActionSkip, filter: idsFilter(ids)}
	err = a.inTx(ctx, act, func(tx pgx.Tx) (int64, error) {
		rows, err := tx.Query(ctx, a.sql.skip.run, pgvalue.UUIDs(ids), len(ids))
		if err != nil {
			return 0, err
		}
		if res, err = a.skipResult(ids, rows, false); err != nil {
			return 0, err
		}
		_, err = tx.Exec(ctx, a.sql.notify, a.channel)
		return int64(len(res.Skipped)), err
	})
	var serr *SkipError
	if err != nil && !errors.As(err, &serr) {
		return SkipResult{}, errtext.Wrap(err, "admin: skip in %s", a.table)
	}
	return res, err
}

// distinctIDs checks named and returns its ids once each, in order.
func distinctIDs(named []uuid.UUID) ([]uuid.UUID, error) {
	if len(named) == 0 {
		return nil, inputErr("IDs", "is empty; name at least one FAILED event")
	}
	if len(named) > MaxSkipIDs {
		return nil, inputErr("IDs", "names %d rows, at most %d per call", len(named), MaxSkipIDs)
	}
	return skipped(named, nil), nil
}

// skipResult reads the skip statement's rows (id, status, locked,
// skipped_at) for ids and returns the result, or a *SkipError naming the
// ids that are missing, not FAILED or locked. dry marks a dry run, whose
// rows carry the skipped_at they had.
func (a *Admin) skipResult(ids []uuid.UUID, rows pgx.Rows, dry bool) (SkipResult, error) {
	type found struct {
		status outbox.Status
		locked bool
		at     *time.Time
	}
	byID := make(map[uuid.UUID]found, len(ids))
	var id uuid.UUID
	var f found
	_, err := pgx.ForEachRow(rows, []any{&id, &f.status, &f.locked, &f.at}, func() error {
		byID[id] = f
		return nil
	})
	if err != nil {
		return SkipResult{}, err
	}
	res := SkipResult{Skipped: ids}
	serr := &SkipError{Table: a.table.String(), Named: len(ids)}
	for _, id := range ids {
		f, ok := byID[id]
		switch {
		case !ok:
			serr.Rejected = append(serr.Rejected, Rejected{ID: id})
		case f.status != outbox.StatusFailed || !f.locked:
			serr.Rejected = append(serr.Rejected, Rejected{ID: id, Status: f.status, Locked: f.status == outbox.StatusFailed})
		case !dry && f.at != nil:
			res.At = append(res.At, *f.at)
		}
	}
	if len(serr.Rejected) > 0 {
		return SkipResult{}, serr
	}
	return res, nil
}
