package admin

import (
	"context"
	"errors"
	"time"
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
	ActionReplay = "replay"
	ActionSkip   = "skip"
	ActionPurge  = "purge"
)

// Actor names who runs an action. Set on ReplayParams, SkipParams or
// PurgeParams, it makes the action audited: one row in the outbox's
// audit table (<table>_audit, schema version 13) that commits in the
// action's own transaction, so that no action commits without its row
// and no row without its action, and one Info line on Config.Logger.
type Actor struct {
	// Name is who acts, as the caller knows them (a user name, or
	// user@host): 1 to [MaxActorName] characters of valid UTF-8 without
	// NUL.
	Name string
	// Source is where the action comes from: [SourceConsole],
	// [SourceOutboxctl], [SourceAdmin] or a caller's own word, 1 to
	// [MaxActorSource] characters of valid UTF-8 without NUL.
	Source string
}

// Actor bounds.
const (
	// MaxActorName is the longest Actor.Name, in characters.
	MaxActorName = 200
	// MaxActorSource is the longest Actor.Source, in characters.
	MaxActorSource = 50
)

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
	// for a purge status, older_than and limit. Never a payload or a
	// header.
	Filter map[string]any `json:"filter"`
	// Rows is how many rows the action changed: replayed, skipped or
	// purged.
	Rows int64 `json:"rows"`
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
	return AuditPage{}, errors.New("TODO")
}
