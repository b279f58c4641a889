package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// ErrMissingPrivilege is matched by the error Start returns when the
// dispatcher's role lacks a privilege on the outbox table that its
// configuration needs (the error is a *PrivilegeError).
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

// PrivilegeError names a privilege on the outbox table that the
// dispatcher's role lacks and what in its configuration needs it. It
// matches ErrMissingPrivilege.
type PrivilegeError struct {
	// Privilege is SELECT, UPDATE or DELETE.
	Privilege string
	// Table is the outbox table, schema-qualified.
	Table string
	// NeededFor says what needs it ("claiming and recording outcomes",
	// "DeleteSent", "retention").
	NeededFor string
	// Columns, when not empty, are the columns of the table the role
	// lacks the privilege on: it holds the privilege on some columns only
	// (a column grant made for an earlier schema version lacks the
	// columns added since).
	Columns []string
}

func (e *PrivilegeError) Error() string {
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

// checkAccess refuses a start whose role lacks a privilege the
// configuration needs, or whose transactions do not start at READ
// COMMITTED. A check that runs out of time is skipped: statement timeouts
// must never stop progress, and the claims' errors then say the same.
func (d *Dispatcher) checkAccess(ctx context.Context) error {
	a, err := d.store.Access(ctx, d.pool)
	if err != nil {
		if ranOutOfTime(err) && ctx.Err() == nil {
			return nil
		}
		return errtext.Wrap(err, "dispatcher: check access")
	}
	table := d.cfg.Table.String()
	for _, p := range []struct {
		have            bool
		privilege, need string
		// missing and all: the columns lacking the privilege, of all
		// those that need it (when missing is shorter, the role holds
		// the privilege on some columns: the error names the others).
		missing, all []string
	}{
		{a.Select, "SELECT", "claiming and recording outcomes", a.SelectMissing, lease.ReadColumns},
		{a.Update, "UPDATE", "claiming and recording outcomes", a.UpdateMissing, lease.WrittenColumns},
		{a.Delete || !d.cfg.DeleteSent, "DELETE", "DeleteSent (deleting each event once sent)", nil, nil},
		{a.Delete || d.cfg.KeepSent, "DELETE", "retention of SENT rows (RetainSent; set KeepSent to keep them)", nil, nil},
		{a.Delete || d.cfg.RetainFailed == 0, "DELETE", "retention of FAILED rows (RetainFailed)", nil, nil},
	} {
		if !p.have {
			e := &PrivilegeError{Privilege: p.privilege, Table: table, NeededFor: p.need}
			if len(p.missing) < len(p.all) {
				e.Columns = p.missing
			}
			return e
		}
	}
	// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
	if a.Isolation != "read committed" && a.Isolation != "read uncommitted" {
		return errtext.WrapHint(ErrIsolation,
			"set default_transaction_isolation = 'read committed' for the dispatcher's role (ALTER ROLE … SET) or connection",
			"dispatcher: its connections start transactions at %s", a.Isolation)
	}
	return nil
}
