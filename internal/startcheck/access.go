package startcheck

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// checkAccess refuses a start whose role lacks a privilege the
// configuration needs, or whose transactions do not start at READ
// COMMITTED. A check that runs out of time is skipped: statement timeouts
// must never stop progress, and the claims' errors then say the same.
func (c *Checker) checkAccess(ctx context.Context) error {
	a, err := c.cfg.Store.Access(ctx, c.cfg.Pool)
	if err != nil {
		if pgerr.RanOutOfTime(err) && ctx.Err() == nil {
			return nil
		}
		return errtext.Wrap(err, "dispatcher: check access")
	}
	r, err := c.cfg.Store.RetainAccess(ctx, c.cfg.Pool)
	if err != nil {
		if pgerr.RanOutOfTime(err) && ctx.Err() == nil {
			return nil
		}
		return errtext.Wrap(err, "dispatcher: check access")
	}
	if e := c.missingPrivilege(a, r); e != nil {
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
func (c *Checker) missingPrivilege(a lease.Access, r lease.RetainAccess) *PrivilegeError {
	table := c.cfg.Table.String()
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
		{a.Sent.Insert || c.cfg.DeleteSent, "INSERT", sentTable, "keeping the SENT history (set DeleteSent to delete sent events instead)", a.Sent.InsertMissing, lease.MovedColumns},
		{r.DefaultSelectMissing == nil || c.cfg.KeepSent, "SELECT", defaultTable, retainSent, r.DefaultSelectMissing, lease.RetainColumns},
		{r.DefaultUpdate || c.cfg.KeepSent, "UPDATE", defaultTable, retainSent, nil, nil},
		{r.DefaultDelete || c.cfg.KeepSent, "DELETE", defaultTable, retainSent, nil, nil},
		{r.SentAdd || c.cfg.DeleteSent && c.cfg.KeepSent, "EXECUTE", "", "creating the SENT history's time partitions", nil, nil},
		{r.SentDrop || c.cfg.KeepSent, "EXECUTE", "", retainSent, nil, nil},
		{r.DeadDelete || c.cfg.RetainFailed == 0, "DELETE", deadTable, retainFailed, nil, nil},
	} {
		if !p.have {
			e := &PrivilegeError{Privilege: p.privilege, Table: p.table, NeededFor: p.need}
			if p.privilege == "EXECUTE" {
				e.Function = c.partitionFunction(p.need == retainSent)
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
func (c *Checker) partitionFunction(drop bool) string {
	names, err := sqlname.For(c.cfg.Table) // validated by New
	if err != nil {
		return ""
	}
	if drop {
		return names.SentDropSignature()
	}
	return names.SentAddSignature()
}
