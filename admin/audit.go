package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Audit sources: where an audited action came from (Actor.Source).
const (
	// SourceConsole is the operator console (admin/console).
	SourceConsole = "console"
	// SourceOutboxctl is the outboxctl command.
	SourceOutboxctl = "outboxctl"
	// SourceAdmin is a program calling this package directly.
	SourceAdmin = "admin"
)

// Audited actions (AuditEntry.Action).
const (
	// ActionReplay is [Admin.Replay].
	ActionReplay = "replay"
	// ActionSkip is [Admin.SkipHeads].
	ActionSkip = "skip"
	// ActionPurge is [Admin.Purge].
	ActionPurge = "purge"
)

// Actor names who runs an action. Set on ReplayParams, SkipParams or
// PurgeParams, it makes the action audited: one row in the outbox's
// audit table (<table>_audit, schema version 13) that commits in the
// action's own transaction, so that no action commits without its row
// and no row without its action, and one Info line on Config.Logger.
type Actor struct {
	// Name is who acts, as the caller knows them (a user name, or
	// user@host): 1 to [MaxActorName] bytes of valid UTF-8 without NUL.
	Name string
	// Source is where the action comes from: [SourceConsole],
	// [SourceOutboxctl], [SourceAdmin] or a caller's own word, 1 to
	// [MaxActorSource] bytes of valid UTF-8 without NUL.
	Source string
	// RequestID, when not zero, makes the action single use: the audit
	// row records it, under a unique index, and an action whose
	// RequestID some audit row already holds changes nothing and
	// returns an error matching [ErrAlreadyDone]. Two concurrent calls
	// with one RequestID: one runs, the other waits for it and, once it
	// committed, returns ErrAlreadyDone (if it rolled back, the other
	// runs). A confirmation form carries one, so that posting it twice
	// acts once. Zero: none, every call acts.
	RequestID uuid.UUID
	// SelectedBy records how the caller chose what the action names:
	// for ids a console picked with a list filter, that filter (key,
	// type, code, time range...). It is stored in the audit row's filter
	// under "selected_by" as given: names and values only, never a
	// payload. At most [MaxSelectedBy] bytes as JSON. Nil: none.
	SelectedBy map[string]any
}

// ErrAlreadyDone is returned (wrapped) by an audited action whose
// Actor.RequestID an audit row already holds: the same request was
// done before (or by a concurrent call that committed first), and this
// call changed nothing.
var ErrAlreadyDone = errors.New("pgoutbox: admin: request already done")

// Actor bounds.
const (
	// MaxActorName is the longest Actor.Name, in bytes.
	MaxActorName = 200
	// MaxActorSource is the longest Actor.Source, in bytes.
	MaxActorSource = 50
	// MaxSelectedBy is the longest Actor.SelectedBy, in bytes of JSON.
	MaxSelectedBy = 4096
	// MaxAuditIDs is the most ids an audit row lists: an action naming
	// more records the first MaxAuditIDs under "ids" and their number
	// under "ids_count", so that one row stays small.
	MaxAuditIDs = 100
)

// checkActor checks an action's Actor (nil: not audited); an invalid one
// gives an *outbox.InputError naming "Actor.Name" or "Actor.Source".
func checkActor(actor *Actor) error {
	if actor == nil {
		return nil
	}
	for _, f := range []struct {
		field, value string
		max          int
	}{{"Actor.Name", actor.Name, MaxActorName}, {"Actor.Source", actor.Source, MaxActorSource}} {
		if f.value == "" {
			return inputErr(f.field, "is empty")
		}
		if reason := pgvalue.TextProblem(f.value, f.max); reason != "" {
			return inputErr(f.field, "%s", reason)
		}
	}
	if actor.SelectedBy == nil {
		return nil
	}
	b, err := json.Marshal(actor.SelectedBy)
	switch {
	case err != nil:
		return inputErr("Actor.SelectedBy", "cannot be written as JSON")
	case len(b) > MaxSelectedBy:
		return inputErr("Actor.SelectedBy", "is %d bytes as JSON, at most %d", len(b), MaxSelectedBy)
	case bytes.Contains(b, []byte(`\u0000`)):
		return inputErr("Actor.SelectedBy", "holds a NUL, which jsonb cannot store")
	}
	return nil
}

// idsFilter is the audit filter of an action naming ids: at most
// MaxAuditIDs of them, and their number when there are more.
func idsFilter(ids []uuid.UUID) map[string]any {
	if len(ids) <= MaxAuditIDs {
		return map[string]any{"ids": ids}
	}
	return map[string]any{"ids": ids[:MaxAuditIDs], "ids_count": len(ids)}
}

// audited is one action to audit: who, what, with which parameters.
type audited struct {
	actor  *Actor
	action string
	filter map[string]any
}

// withSelection is act's filter with its Actor.SelectedBy, if any, under
// "selected_by".
func (act audited) withSelection() map[string]any {
	if act.actor.SelectedBy == nil {
		return act.filter
	}
	f := maps.Clone(act.filter)
	f["selected_by"] = act.actor.SelectedBy
	return f
}

// claim takes act's request (when its Actor has a RequestID) in tx, the
// action's own transaction, before the action runs: it waits for a
// concurrent transaction holding the same request (a transaction-level
// advisory lock on the request) and, once it has it, returns an error
// matching ErrAlreadyDone when an audit row records the request. The
// audit row's unique index on request_id stays the guarantee (record).
func (a *Admin) claim(ctx context.Context, tx pgx.Tx, act audited) error {
	if act.actor == nil || act.actor.RequestID == uuid.Nil {
		return nil
	}
	req := pgvalue.UUID(act.actor.RequestID)
	if _, err := tx.Exec(ctx, a.sql.auditLock, req); err != nil {
		return a.auditErr(err)
	}
	var done bool
	if err := tx.QueryRow(ctx, a.sql.auditDone, req).Scan(&done); err != nil {
		return a.auditErr(err)
	}
	if done {
		return a.alreadyDone(act, nil)
	}
	return nil
}

// alreadyDone is the error of act, whose request an audit row holds
// (cause: the unique violation that proved it, or nil).
func (a *Admin) alreadyDone(act audited, cause error) error {
	err := fmt.Errorf("%w: request %s", ErrAlreadyDone, act.actor.RequestID)
	if cause != nil {
		return errtext.Because(err, cause)
	}
	return err
}

// record inserts the audit row of act, which changed rows rows, in tx:
// the action's own transaction. Its request_id (NULL without
// Actor.RequestID) is under a unique index: a request recorded already
// fails it with an error matching ErrAlreadyDone, and the action rolls
// back.
func (a *Admin) record(ctx context.Context, tx pgx.Tx, act audited, rows int64) error {
	filter, err := json.Marshal(act.withSelection())
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	var req pgtype.UUID
	if act.actor.RequestID != uuid.Nil {
		req = pgvalue.UUID(act.actor.RequestID)
	}
	_, err = tx.Exec(ctx, a.sql.auditInsert, act.actor.Name, act.actor.Source, act.action, string(filter), rows, req)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerr.UniqueViolation {
		return a.alreadyDone(act, err)
	}
	return a.auditErr(err)
}

// auditErr explains a failed read or write of the audit table: a missing
// table (a schema older than version 13) matches outbox.ErrMissingTable,
// and both it and a missing privilege say what to do.
func (a *Admin) auditErr(err error) error {
	const without = "or act without an Actor (outboxctl: -no-audit)"
	switch {
	case err == nil:
		return nil
	case pgerr.OwnMissingTable(err):
		return errtext.WrapHint(errtext.WrapAs(outbox.ErrMissingTable, err, "audit table %s", a.names.Audit),
			"migrate to schema version 13 with outboxctl migrate or migrations.Migrate, "+without, "audit")
	case pgerr.Code(err) == pgerr.InsufficientPrivilege:
		return errtext.WrapHint(err, "GRANT SELECT, INSERT ON TABLE "+a.names.Audit+" TO the role (see migrations.RenderGrants), "+without, "audit")
	}
	return errtext.Wrap(err, "audit")
}

// logAction writes act's Info line on the Admin's logger, once its
// transaction committed.
func (a *Admin) logAction(ctx context.Context, act audited, rows int64) {
	if a.logger == nil {
		return
	}
	filter, _ := json.Marshal(act.withSelection())
	a.logger.InfoContext(ctx, "pgoutbox: admin: "+act.action, "table", a.table.String(),
		"actor", act.actor.Name, "source", act.actor.Source, "action", act.action, "filter", string(filter), "rows", rows)
}

// inTx runs fn in a transaction of its own (a savepoint when the Admin's
// DB is a pgx.Tx) and, when act has an actor, takes its request first
// (claim: a request done already runs nothing) and records its audit row
// in that transaction from the rows fn returns, then logs it once
// committed.
func (a *Admin) inTx(ctx context.Context, act audited, fn func(tx pgx.Tx) (int64, error)) error {
	var rows int64
	err := pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) (err error) {
		if err = a.claim(ctx, tx, act); err != nil {
			return err
		}
		if rows, err = fn(tx); err != nil || act.actor == nil {
			return err
		}
		return a.record(ctx, tx, act, rows)
	})
	if err == nil && act.actor != nil {
		a.logAction(ctx, act, rows)
	}
	return err
}

// AuditLog page sizes.
const (
	// DefaultAuditLimit is the page size when AuditParams.Limit is 0.
	DefaultAuditLimit = 100
	// MaxAuditLimit is the largest AuditParams.Limit.
	MaxAuditLimit = 1000
)

// AuditParams selects a page of the audit log, newest first.
type AuditParams struct {
	// After continues after this entry id: a previous page's Next. 0
	// starts at the newest entry.
	After int64
	// Limit is the page size, 1 to [MaxAuditLimit]. Defaults to
	// [DefaultAuditLimit].
	Limit int
}

// AuditEntry is one audited action.
type AuditEntry struct {
	// ID is the entry's number, increasing with each entry.
	ID int64 `json:"id"`
	// At is when the action's transaction started (the database clock).
	At time.Time `json:"at"`
	// Actor is Actor.Name.
	Actor string `json:"actor"`
	// Source is Actor.Source.
	Source string `json:"source"`
	// Action is [ActionReplay], [ActionSkip] or [ActionPurge].
	Action string `json:"action"`
	// Filter holds the action's parameters as JSON: for a replay the
	// ids, or type, code, failed_before and limit; for a skip the ids;
	// for a purge status, older_than and limit. Ids are listed up to
	// [MaxAuditIDs], with "ids_count" when there were more; the caller's
	// Actor.SelectedBy is under "selected_by". Never a payload or a
	// header.
	Filter map[string]any `json:"filter"`
	// Rows is how many rows the action changed: replayed, skipped or
	// purged.
	Rows int64 `json:"rows"`
	// RequestID is Actor.RequestID, zero when the action had none.
	RequestID uuid.UUID `json:"request_id"`
}

// AuditPage is one page of AuditLog.
type AuditPage struct {
	// Entries are the page's entries, newest (highest ID) first.
	Entries []AuditEntry `json:"entries"`
	// Next continues after this page (AuditParams.After); 0 when there
	// are no older entries.
	Next int64 `json:"next"`
}

// AuditLog returns a page of the audit log, newest first, by keyset on
// the entry id through the audit table's primary key: a page costs its
// rows, however long the log.
func (a *Admin) AuditLog(ctx context.Context, p AuditParams) (AuditPage, error) {
	if p.After < 0 {
		return AuditPage{}, inputErr("After", "is %d, must be 0 (the newest) or an entry id", p.After)
	}
	limit, err := checkLimit(p.Limit, DefaultAuditLimit, MaxAuditLimit)
	if err != nil {
		return AuditPage{}, err
	}
	rows, err := a.db.Query(ctx, a.sql.auditPage, p.After, limit+1)
	if err != nil {
		return AuditPage{}, errtext.Wrap(err, "admin: audit log %s", a.table)
	}
	page := AuditPage{Entries: make([]AuditEntry, 0, limit)}
	var e AuditEntry
	var filter []byte
	var req pgtype.UUID
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.At, &e.Actor, &e.Source, &e.Action, &filter, &e.Rows, &req}, func() error {
		e.Filter, e.RequestID = nil, uuid.UUID(req.Bytes)
		if err := json.Unmarshal(filter, &e.Filter); err != nil {
			return fmt.Errorf("entry %d: filter is not a JSON object", e.ID)
		}
		page.Entries = append(page.Entries, e)
		return nil
	})
	if err != nil {
		return AuditPage{}, errtext.Wrap(err, "admin: audit log %s", a.table)
	}
	if len(page.Entries) > limit {
		page.Entries = page.Entries[:limit]
		page.Next = page.Entries[limit-1].ID
	}
	return page, nil
}
