package startcheck

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMissingPrivilege is matched by the error Start returns when the
// dispatcher's role lacks a privilege on the outbox table, its dead
// letters or its SENT history that its configuration needs (the error is
// a *PrivilegeError).
var ErrMissingPrivilege = errors.New("pgoutbox: missing privilege")

// ErrIsolation is matched by the error Start returns when the
// dispatcher's connections start their transactions at REPEATABLE READ or
// SERIALIZABLE (default_transaction_isolation set on the server,
// database, role or connection); READ UNCOMMITTED, which PostgreSQL runs
// as READ COMMITTED, is accepted. The dispatcher's statements
// are designed for READ COMMITTED: under SERIALIZABLE a share of its
// claims and completions fail with serialization errors (40001), and
// under REPEATABLE READ a claim can miss rows committed while it runs.
var ErrIsolation = errors.New("pgoutbox: transactions do not start at read committed")

// PrivilegeError names a privilege on one of the outbox's tables that
// the dispatcher's role lacks, the table, and what in its configuration
// needs it. It matches ErrMissingPrivilege.
type PrivilegeError struct {
	// Privilege is SELECT, INSERT, UPDATE or DELETE on a table, or
	// EXECUTE on a function.
	Privilege string
	// Table is the table, schema-qualified: the outbox table
	// ("public.outbox_events"), its dead letters ("…_dead") or its SENT
	// history ("…_sent").
	Table string
	// NeededFor says what needs it ("claiming and recording outcomes",
	// "moving FAILED events to the dead letters", "retention of SENT
	// rows", …).
	NeededFor string
	// Function, when not empty, is the function (schema-qualified, with
	// its argument types) the role may not EXECUTE, and Table is empty:
	// one of the history's partition functions ("…_sent_add(timestamptz,
	// timestamptz)", "…_sent_drop(timestamptz)").
	Function string
	// Columns, when not empty, are the columns of the table the role
	// lacks the privilege on: it holds the privilege on some columns only
	// (a column grant made for an earlier schema version lacks the
	// columns added since).
	Columns []string
}

// Error names the privilege, the table (or function), what needs it, and
// the GRANT that fixes it.
func (e *PrivilegeError) Error() string {
	if e.Function != "" {
		return fmt.Sprintf("pgoutbox: missing privilege: the dispatcher's role lacks EXECUTE on function %s, needed for %s (GRANT EXECUTE ON FUNCTION %s TO the role; see migrations.RenderGrants)",
			e.Function, e.NeededFor, e.Function)
	}
	if len(e.Columns) > 0 {
		cols := strings.Join(e.Columns, ", ")
		return fmt.Sprintf("pgoutbox: missing privilege: the dispatcher's role lacks %s on column(s) %s of table %s, needed for %s (GRANT %s (%s) ON %s TO the role; see docs/operations.md)",
			e.Privilege, cols, e.Table, e.NeededFor, e.Privilege, cols, e.Table)
	}
	return fmt.Sprintf("pgoutbox: missing privilege: the dispatcher's role lacks %s on table %s, needed for %s (GRANT %s ON %s TO the role; see migrations.RenderGrants)",
		e.Privilege, e.Table, e.NeededFor, e.Privilege, e.Table)
}

// Is makes a *PrivilegeError match ErrMissingPrivilege.
func (e *PrivilegeError) Is(target error) bool { return target == ErrMissingPrivilege }

// ErrNoOrderIndex is matched by the error Start returns when the
// dispatcher has Ordering PerKey, the outbox table has no valid per-key
// order index, and Start could not build it (the error is an
// *OrderIndexError). Since schema version 12 the index exists only where
// migrations.Config.KeyOrder is set or a PerKey dispatcher built it.
var ErrNoOrderIndex = errors.New("pgoutbox: no order index")

// OrderIndexError says that the outbox table lacks the per-key order
// index that Ordering PerKey reads (its claim probes each key's head
// through it), why Start did not build it, and how to build it. It
// matches ErrNoOrderIndex.
type OrderIndexError struct {
	// Table is the outbox table, schema-qualified.
	Table string
	// Index is the order index, schema-qualified.
	Index string
	// Invalid is true when the index exists but is INVALID (a CREATE
	// INDEX CONCURRENTLY that failed, or one still running); false when
	// it is missing.
	Invalid bool
	// Create is the statement that builds the index without blocking
	// writes, and Drop the one that drops an invalid one first (run each
	// outside a transaction).
	Create, Drop string
	// Cause is why Start's own build failed: the role does not own the
	// table or may not create in its schema (42501), a statement or lock
	// timeout ended it, Start's context ended while it waited for the
	// build, or builds kept failing.
	Cause error
}

// Error names the index and the table, whether the index is missing or
// INVALID, how to build it, and why Start's own build failed.
func (e *OrderIndexError) Error() string {
	state, fix := "missing", "run "+e.Create
	if e.Invalid {
		state = "INVALID (a CREATE INDEX CONCURRENTLY that failed or is running)"
		fix = "once no build runs, " + e.Drop + "; then " + e.Create
	}
	msg := fmt.Sprintf("pgoutbox: dispatcher: Ordering PerKey needs the order index %s of table %s, which is %s "+
		"(set migrations.Config.KeyOrder and run migrations.Migrate, which builds it without blocking writes; or %s; see docs/ordering.md)",
		e.Index, e.Table, state, fix)
	if e.Cause != nil {
		msg += "; building it at Start failed: " + e.Cause.Error()
	}
	return msg
}

// Is makes an *OrderIndexError match ErrNoOrderIndex.
func (e *OrderIndexError) Is(target error) bool { return target == ErrNoOrderIndex }

// Unwrap returns Cause.
func (e *OrderIndexError) Unwrap() error { return e.Cause }
