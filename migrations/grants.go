package migrations

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Roles names the database roles [RenderGrants] writes grants for, one
// per job. An empty name leaves that role out. The roles must exist
// (CREATE ROLE … LOGIN, with the credentials you choose); RenderGrants
// only grants. The privileges below are the measured minimum: a test
// removes each one and sees the role's work fail.
type Roles struct {
	// Migrator runs [Migrate] (or the files of [Render]). It gets the
	// schema, created for it when missing, with USAGE and CREATE on it,
	// and owns the tables it creates; it needs no privilege on the
	// database itself.
	Migrator string
	// Producer emits events, one at a time or in batches (which the
	// emitter writes with COPY): USAGE on the schema, INSERT on the
	// outbox table.
	Producer string
	// Dispatcher runs a dispatcher: USAGE on the schema; SELECT, UPDATE
	// and DELETE on the outbox table (every outcome but a retry moves or
	// deletes its row); SELECT and INSERT on the dead letters and the
	// SENT history (a FAILED outcome moves its row to the dead letters, a
	// success to the history, and a lost reply is looked up in both),
	// UPDATE on the dead letters (a move replaces a dead letter of the
	// same id: INSERT … ON CONFLICT DO UPDATE); EXECUTE on the history's
	// partition function <table>_sent_add and its BRIN summarizing
	// function <table>_sent_summarize (the retention pass); and
	// SELECT on the version table (dispatcher.Start verifies the schema,
	// unless Config.SkipVerify). Privileges on the SENT history apply to
	// its partitions when read and written through it, as the
	// dispatcher's outcomes do.
	Dispatcher string
	// DispatcherDeletes grants Dispatcher what its retention job needs
	// (on by default: dispatcher.Config.RetainSent and RetainFailed): it
	// deletes old dead letters, and old rows of the history's default
	// partition, which it reaches directly (<table>_sent_default), in
	// batches locked FOR UPDATE: DELETE on the dead letters,
	// SELECT, UPDATE and DELETE on the default partition. Leave it false
	// only for dispatchers run with KeepSent and no RetainFailed:
	// dispatcher.Start refuses a configuration that needs these without
	// them (dispatcher.ErrMissingPrivilege). It also gets EXECUTE on
	// <table>_sent_drop, the function (SECURITY DEFINER, owned by the
	// migrator) that retires the history's old time partitions; EXECUTE on
	// <table>_sent_add, which creates them ahead, it gets either way. No
	// role but the migrator owns the history or may create in the schema.
	DispatcherDeletes bool
	// Operator runs package admin and outboxctl (status, counts, list,
	// inspect, replay, skip, purge, version, verify): USAGE on the
	// schema; SELECT and INSERT on the outbox table (a replay moves a
	// dead letter back into it); SELECT, UPDATE and DELETE on the dead
	// letters (skip, replay, purge); SELECT on the SENT history; SELECT,
	// UPDATE and DELETE on the history's default partition and EXECUTE on
	// <table>_sent_drop (purge of SENT rows); SELECT on the audit table
	// and INSERT on its columns but id and at (an audited action writes
	// its row, AuditLog reads them; the database numbers and timestamps
	// each row, and there is no UPDATE or DELETE: an operator cannot
	// rewrite or backdate the log);
	// SELECT on its version table.
	//
	// For a log (Config.Kind outbox.KindLog): SELECT on the log, its
	// ticks and its version table; SELECT, INSERT, UPDATE and DELETE on
	// the cursors, parked keys and parked events (groups, replay, skip);
	// SELECT on the ticker; EXECUTE on <log>_part_add and
	// <log>_part_truncate.
	Operator string
	// Relay runs a relay on a log (Config.Kind outbox.KindLog; an
	// *outbox.InputError for an outbox): USAGE on the schema; SELECT on
	// the log and its ticks (reads through the partitioned log reach
	// every part, the future ones too: PostgreSQL checks the privileges
	// of the table named in the query, not of its partitions, so parts
	// created later need no grant); SELECT and UPDATE on the ticker's
	// lease row; SELECT, INSERT, UPDATE and DELETE on the cursors, the
	// parked keys and the parked events; SELECT on the version table; and
	// EXECUTE on the log's SECURITY DEFINER functions (<log>_tick,
	// <log>_part_add, <log>_part_truncate, those the schema has). For a
	// log, Producer gets INSERT on the log alone: seq is an identity,
	// whose sequence needs no grant, and xid and created_at come from
	// defaults. Dispatcher must be empty for a log.
	Relay string
}

// Grants is the SQL that gives each role of a [Roles] what it needs, in
// two scripts run at different times by different roles.
type Grants struct {
	// BeforeMigrate is run once, before the first Migrate, by a superuser
	// or another role that may create schemas and grant on them. It
	// creates the schema owned by the migrator when missing and grants
	// USAGE on it to the other roles. Its comments advise the database-wide
	// REVOKEs (temporary tables) that only the database owner can decide.
	BeforeMigrate string
	// AfterMigrate is run after Migrate by the migrator (the tables'
	// owner) or a superuser: the privileges on the outbox table, its dead
	// letters, its SENT history, its audit table and its version table. Privileges survive the ALTER TABLEs of later
	// migrations; run it again after an upgrade whose CHANGELOG says so.
	AfterMigrate string
}

// RenderGrants returns the least-privilege grants of roles on the outbox
// of cfg, every name quoted; for a log (cfg.Kind outbox.KindLog) on the
// log, its ticks, ticker, cursors, parked tables and functions (see
// [Roles], Relay). It touches no database. A Dispatcher for a log or a
// Relay for an outbox gives an *outbox.InputError naming the field, and
// an invalid Kind an *outbox.ConfigError. An invalid table
// gives an error wrapping [outbox.ErrInvalidIdentifier], and a role name
// longer than 63 bytes or holding a NUL byte an *outbox.InputError naming
// the field of [Roles].
func RenderGrants(cfg Config, roles Roles) (Grants, error) {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return Grants{}, err
	}
	if err := checkKind(cfg.Kind); err != nil {
		return Grants{}, err
	}
	if err := roles.validate(cfg.Kind); err != nil {
		return Grants{}, err
	}
	if cfg.Kind == outbox.KindLog {
		return Grants{BeforeMigrate: beforeMigrate(names, roles), AfterMigrate: afterMigrateLog(names, roles)}, nil
	}
	return Grants{BeforeMigrate: beforeMigrate(names, roles), AfterMigrate: afterMigrate(names, roles)}, nil
}

// validate checks that every role name is one PostgreSQL can hold, and
// that the roles fit the kind: no Dispatcher for a log, no Relay for an
// outbox.
func (r Roles) validate(kind outbox.TableKind) error {
	for _, f := range []struct{ field, name string }{
		{"Migrator", r.Migrator}, {"Producer", r.Producer}, {"Dispatcher", r.Dispatcher}, {"Operator", r.Operator},
		{"Relay", r.Relay},
	} {
		if len(f.name) > 63 || strings.ContainsRune(f.name, 0) {
			return &outbox.InputError{Field: "Roles." + f.field, Reason: "must be a role name of at most 63 bytes without NUL"}
		}
	}
	switch {
	case kind == outbox.KindLog && r.Dispatcher != "":
		return &outbox.InputError{Field: "Roles.Dispatcher", Reason: "must be empty for a log (Kind outbox.KindLog): set Relay"}
	case kind == outbox.KindOutbox && r.Relay != "":
		return &outbox.InputError{Field: "Roles.Relay", Reason: "must be empty for an outbox (Kind outbox.KindOutbox): set Dispatcher"}
	}
	return nil
}

// grant is one GRANT statement: privileges on an object to role, or
// nothing when the role is left out.
func grant(privileges, object, role string) string {
	if role == "" {
		return ""
	}
	return fmt.Sprintf("GRANT %s ON %s TO %s;\n", privileges, object, pgx.Identifier{role}.Sanitize())
}

func beforeMigrate(n sqlname.Names, r Roles) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgoutbox roles for %s, part 1 of 2: run once before the first Migrate,\n"+
		"-- as a superuser or a role that may create schemas.\n\n", n.Table)
	schema := "SCHEMA " + n.Schema
	if r.Migrator != "" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s AUTHORIZATION %s;\n", n.Schema, pgx.Identifier{r.Migrator}.Sanitize())
		b.WriteString(grant("USAGE, CREATE", schema, r.Migrator))
	}
	b.WriteString(grant("USAGE", schema, r.Producer) + grant("USAGE", schema, r.Dispatcher) + grant("USAGE", schema, r.Operator) +
		grant("USAGE", schema, r.Relay))
	b.WriteString(`
-- Database-wide, for the database owner to decide (they apply to every role
-- that has no grant of its own):
-- PUBLIC may create temporary tables in every database by default, so each
-- role above can. To take that away:
--   REVOKE TEMPORARY ON DATABASE <database> FROM PUBLIC;
-- PostgreSQL 14 and older also let PUBLIC create tables in schema public:
--   REVOKE CREATE ON SCHEMA public FROM PUBLIC;
`)
	return b.String()
}

func afterMigrate(n sqlname.Names, r Roles) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgoutbox roles for %s, part 2 of 2: run after Migrate,\n"+
		"-- as the migrator (the tables' owner) or a superuser.\n\n", n.Table)
	table, dead, sent, version := "TABLE "+n.Qualified, "TABLE "+n.Dead, "TABLE "+n.Sent, "TABLE "+n.VersionTable
	sentDefault := "TABLE " + pgx.Identifier{n.Table.Schema, n.Object(sqlname.SuffixSentDefault)}.Sanitize()
	b.WriteString(grant("INSERT", table, r.Producer))
	b.WriteString(grant("SELECT, UPDATE, DELETE", table, r.Dispatcher))
	if r.DispatcherDeletes {
		b.WriteString(grant("SELECT, INSERT, UPDATE, DELETE", dead, r.Dispatcher))
	} else {
		b.WriteString(grant("SELECT, INSERT, UPDATE", dead, r.Dispatcher))
	}
	b.WriteString(grant("SELECT, INSERT", sent, r.Dispatcher))
	if r.DispatcherDeletes {
		b.WriteString(grant("SELECT, UPDATE, DELETE", sentDefault, r.Dispatcher))
	}
	b.WriteString(grant("EXECUTE", "FUNCTION "+n.SentAddSignature(), r.Dispatcher))
	b.WriteString(grant("EXECUTE", "FUNCTION "+n.SentSummarizeSignature(), r.Dispatcher))
	if r.DispatcherDeletes {
		b.WriteString(grant("EXECUTE", "FUNCTION "+n.SentDropSignature(), r.Dispatcher))
	}
	b.WriteString(grant("SELECT", version, r.Dispatcher))
	b.WriteString(grant("SELECT, INSERT", table, r.Operator))
	b.WriteString(grant("SELECT, UPDATE, DELETE", dead, r.Operator))
	b.WriteString(grant("SELECT", sent, r.Operator))
	b.WriteString(grant("SELECT, UPDATE, DELETE", sentDefault, r.Operator))
	b.WriteString(grant("EXECUTE", "FUNCTION "+n.SentDropSignature(), r.Operator))
	b.WriteString(grant("SELECT, INSERT (actor, source, action, filter, rows, request_id)", "TABLE "+n.Audit, r.Operator))
	b.WriteString(grant("SELECT", version, r.Operator))
	return b.String()
}

// afterMigrateLog is afterMigrate for a log (outbox.KindLog): see the
// fields of Roles. The functions granted are those the log's templates
// create (logFunctions).
func afterMigrateLog(n sqlname.Names, r Roles) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgoutbox roles for the log %s, part 2 of 2: run after Migrate,\n"+
		"-- as the migrator (the tables' owner) or a superuser. Privileges on the\n"+
		"-- partitioned log apply to its parts, present and future, when read and\n"+
		"-- written through it.\n\n", n.Table)
	read := "TABLE " + n.Qualified + ", " + n.Log(sqlname.SuffixTicks) + ", " + n.VersionTable
	ticker := "TABLE " + n.Log(sqlname.SuffixTicker)
	groups := "TABLE " + n.Log(sqlname.SuffixCursors) + ", " + n.Log(sqlname.SuffixParkedKeys) + ", " + n.Log(sqlname.SuffixParked)
	b.WriteString(grant("INSERT", "TABLE "+n.Qualified, r.Producer))
	for _, role := range []string{r.Relay, r.Operator} {
		b.WriteString(grant("SELECT", read, role))
		b.WriteString(grant("SELECT, INSERT, UPDATE, DELETE", groups, role))
	}
	b.WriteString(grant("SELECT, UPDATE", ticker, r.Relay))
	b.WriteString(grant("SELECT", ticker, r.Operator))
	for _, f := range logFunctions {
		fn := "FUNCTION " + n.Function(f.suffix) + "(" + f.types + ")"
		if f.relay {
			b.WriteString(grant("EXECUTE", fn, r.Relay))
		}
		if f.operator {
			b.WriteString(grant("EXECUTE", fn, r.Operator))
		}
	}
	return b.String()
}
