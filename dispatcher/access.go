package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
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
	r, err := d.store.RetainAccess(ctx, d.pool)
	if err != nil {
		if ranOutOfTime(err) && ctx.Err() == nil {
			return nil
		}
		return errtext.Wrap(err, "dispatcher: check access")
	}
	if e := d.missingPrivilege(a, r); e != nil {
		return e
	}
	// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
	if a.Isolation != "read committed" && a.Isolation != "read uncommitted" {
		return errtext.WrapHint(ErrIsolation,
			"set default_transaction_isolation = 'read committed' for the dispatcher's role (ALTER ROLE … SET) or connection",
			"dispatcher: its connections start transactions at %s", a.Isolation)
	}
	return nil
}

// privilegeNeed is one privilege a dispatcher needs on one table: have
// says whether the role holds it; missing and all are the columns lacking
// it of all those that need it (when missing is shorter, the role holds
// the privilege on some columns: the error names the others).
type privilegeNeed struct {
	have                   bool
	privilege, table, need string
	missing, all           []string
}

// missingPrivilege returns the first privilege the configuration needs
// that the role lacks, as a *PrivilegeError, or nil. Every success and
// FAILED outcome deletes its row from the outbox table (schema version
// 10 on), a FAILED outcome moves it to the dead letters and a success,
// unless DeleteSent, to the SENT history; a lost reply is looked up in
// both. Retention deletes old dead letters and old rows of the history's
// default partition (which it reaches directly) in batches locked FOR
// UPDATE; its partition work runs the history's partition functions.
func (d *Dispatcher) missingPrivilege(a lease.Access, r lease.RetainAccess) *PrivilegeError {
	table := d.cfg.Table.String()
	deadTable, sentTable, defaultTable := table+sqlname.SuffixDead, table+sqlname.SuffixSent, table+sqlname.SuffixSentDefault
	retainSent, retainFailed := "retention of SENT rows (RetainSent; set KeepSent to keep them)", "retention of FAILED rows (RetainFailed)"
	for _, p := range []privilegeNeed{
		{a.Select, "SELECT", table, "claiming and recording outcomes", a.SelectMissing, lease.ReadColumns},
		{a.Update, "UPDATE", table, "claiming and recording outcomes", a.UpdateMissing, lease.WrittenColumns},
		{a.Delete, "DELETE", table, "recording outcomes (a sent or FAILED event leaves the outbox table)", nil, nil},
		{a.Dead.Select, "SELECT", deadTable, "moving FAILED events to the dead letters, ordered claims and looking up lost replies", a.Dead.SelectMissing, lease.DeadReadColumns},
		{a.Dead.Insert, "INSERT", deadTable, "moving FAILED events to the dead letters", a.Dead.InsertMissing, lease.MovedColumns},
		{a.Dead.Update, "UPDATE", deadTable, "moving FAILED events to the dead letters (a dead letter of the same id is replaced)", a.Dead.UpdateMissing, lease.MovedColumns},
		{a.Sent.Select, "SELECT", sentTable, "looking up lost replies in the SENT history", a.Sent.SelectMissing, lease.SentReadColumns},
		{a.Sent.Insert || d.cfg.DeleteSent, "INSERT", sentTable, "keeping the SENT history (set DeleteSent to delete sent events instead)", a.Sent.InsertMissing, lease.MovedColumns},
		{r.DefaultSelectMissing == nil || d.cfg.KeepSent, "SELECT", defaultTable, retainSent, r.DefaultSelectMissing, lease.RetainColumns},
		{r.DefaultUpdate || d.cfg.KeepSent, "UPDATE", defaultTable, retainSent, nil, nil},
		{r.DefaultDelete || d.cfg.KeepSent, "DELETE", defaultTable, retainSent, nil, nil},
		{r.SentAdd || d.cfg.DeleteSent && d.cfg.KeepSent, "EXECUTE", "", "creating the SENT history's time partitions", nil, nil},
		{r.SentDrop || d.cfg.KeepSent, "EXECUTE", "", retainSent, nil, nil},
		{r.DeadDelete || d.cfg.RetainFailed == 0, "DELETE", deadTable, retainFailed, nil, nil},
	} {
		if !p.have {
			e := &PrivilegeError{Privilege: p.privilege, Table: p.table, NeededFor: p.need}
			if p.privilege == "EXECUTE" {
				e.Function = d.partitionFunction(p.need == retainSent)
			}
			if len(p.missing) < len(p.all) {
				e.Columns = p.missing
			}
			return e
		}
	}
	return nil
}

// partitionFunction is the signature of the history's partition function
// that drops partitions (drop) or creates them.
func (d *Dispatcher) partitionFunction(drop bool) string {
	names, err := sqlname.For(d.cfg.Table) // validated by New
	if err != nil {
		return ""
	}
	if drop {
		return names.SentDropSignature()
	}
	return names.SentAddSignature()
}
