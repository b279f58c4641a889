package dispatcher_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A grant of UPDATE on the columns the dispatcher wrote up to schema
// version 8 (docs/operations.md offers it) lacks outcome_token, which
// every outcome of version 9 writes: the database would refuse every
// outcome, and the refused-outcome write too (it records its token like
// every outcome), so each event would run again until worker_lost. Start
// refuses such a role, naming the privilege and the column; once the
// column is granted, it starts.
func TestStartRefusesColumnGrantWithoutOutcomeToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	version8 := []string{
		"status", "attempts", "recoveries", "snoozes", "next_attempt_at", "lock_token", "lock_owner",
		"locked_at", "lease_until", "heartbeat_at", "started_at", "sent_at", "failed_at",
		"last_error_code", "last_error", "attempt_log",
	}
	role, quoted := newGrantedRole(t, db, "pgotest_columns", `
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, DELETE ON outbox_events TO %[2]s;
GRANT UPDATE (%[3]s) ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
`+finishedGrants+``, strings.Join(version8, ", "))

	err := roleDispatcher(t, db, role).Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrMissingPrivilege)
	var pe *dispatcher.PrivilegeError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "UPDATE", pe.Privilege)
	require.Contains(t, err.Error(), "outcome_token")

	_, err = db.Pool.Exec(ctx, `GRANT UPDATE (outcome_token) ON outbox_events TO `+quoted)
	require.NoError(t, err)
	runDispatcher(t, roleDispatcher(t, db, role))
}

// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED (its documentation,
// "Transaction Isolation"): a role whose transactions default to it gets
// the isolation the dispatcher's statements are designed for, so Start
// lets it start instead of refusing it with ErrIsolation.
func TestStartAcceptsReadUncommittedDefault(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	role, _ := newGrantedRole(t, db, "pgotest_uncommitted", `
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
`+finishedGrants+`;
ALTER ROLE %[2]s SET default_transaction_isolation = 'read uncommitted'`)
	runDispatcher(t, roleDispatcher(t, db, role))
}

// The columns the dispatcher's statements read (claims, read-backs,
// recovery, next-due, outcomes), spelled out here rather than taken from
// internal/lease so that a column left out of lease.ReadColumns fails the
// test's run with the column-granted role.
var readColumns = []string{
	"id", "seq", "event_type", "aggregate_type", "aggregate_id", "partition_key", "idempotency_key",
	"content_type", "payload", "headers", "status", "attempts", "recoveries", "snoozes",
	"next_attempt_at", "lock_token", "lock_owner", "locked_at", "lease_until", "started_at",
	"skipped_at", "last_error_code", "last_error", "attempt_log", "outcome_token", "created_at",
	"sent_at", "failed_at", "ctid",
}

// A role granted SELECT on some columns only used to pass Start (the
// check asked for SELECT on any column) and then fail every claim. Start
// refuses a column grant that lacks a column the claim reads, naming the
// privilege and the column; with the column granted, it starts, delivers
// and recovers an expired lease (recovery reads no column beyond these).
func TestStartRefusesColumnSelectGrantWithoutClaimedColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	var granted []string
	for _, c := range readColumns {
		if c != "idempotency_key" {
			granted = append(granted, c)
		}
	}
	role, quoted := newGrantedRole(t, db, "pgotest_select_columns", `
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT (%[3]s) ON outbox_events TO %[2]s;
GRANT UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
`+finishedGrants+``, strings.Join(granted, ", "))

	err := roleDispatcher(t, db, role).Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrMissingPrivilege)
	var pe *dispatcher.PrivilegeError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "SELECT", pe.Privilege)
	require.Equal(t, []string{"idempotency_key"}, pe.Columns)
	require.Contains(t, err.Error(), "GRANT SELECT (idempotency_key)")

	_, err = db.Pool.Exec(ctx, `GRANT SELECT (idempotency_key) ON outbox_events TO `+quoted)
	require.NoError(t, err)
	ids := insertEvents(t, db, "x", 2)
	// The second row's lease expired under a worker that never started
	// it: recovery returns it to PENDING, and a claim delivers it.
	_, err = db.Pool.Exec(ctx, `UPDATE outbox_events SET status = 'PROCESSING', lock_token = gen_random_uuid(),
	locked_at = now(), lease_until = now() - interval '1 second' WHERE id = $1`, ids[1])
	require.NoError(t, err)
	runDispatcher(t, roleDispatcher(t, db, role))
	waitFor(t, "both events sent", func() bool { return statusCounts(t, db)[outbox.StatusSent] == 2 })
}

// Start refuses a role that lacks a privilege its configuration needs on
// the outbox table, its dead letters or its SENT history, naming the
// privilege, the table and what needs it: every success and FAILED
// outcome deletes its row from the outbox table, a FAILED outcome
// inserts it into the dead letters and a success, unless DeleteSent, into
// the history; lost replies are looked up in both; retention deletes old
// dead letters and old rows of the history's default partition, in
// batches locked FOR UPDATE. Without the grant the database would refuse those outcomes
// and each event would run again. A configuration that does not need the
// missing privilege starts and delivers.
func TestStartRefusesWithoutPrivilegeOnEachTable(t *testing.T) {
	t.Parallel()
	const all = `GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
` + finishedGrants
	keepSent := func(c *dispatcher.Config) { c.KeepSent = true }
	for _, tc := range []struct {
		name, revoke, privilege, table, needs string
		configure                             func(*dispatcher.Config)
		// allowed configures a dispatcher that needs no such privilege.
		allowed func(*dispatcher.Config)
	}{
		{"DeleteOnTable", `REVOKE DELETE ON outbox_events FROM %[2]s`, "DELETE", "outbox_events", "recording outcomes", keepSent, nil},
		{"DeleteOnTableWithDeleteSent", `REVOKE DELETE ON outbox_events FROM %[2]s`, "DELETE", "outbox_events", "recording outcomes",
			func(c *dispatcher.Config) { c.DeleteSent, c.KeepSent = true, true }, nil},
		{"InsertOnDead", `REVOKE INSERT ON outbox_events_dead FROM %[2]s`, "INSERT", "outbox_events_dead", "dead letters", keepSent, nil},
		{"SelectOnDead", `REVOKE SELECT ON outbox_events_dead FROM %[2]s`, "SELECT", "outbox_events_dead", "lost replies", keepSent, nil},
		{"SelectOnSent", `REVOKE SELECT ON outbox_events_sent FROM %[2]s`, "SELECT", "outbox_events_sent", "lost replies", keepSent, nil},
		{"InsertOnSent", `REVOKE INSERT ON outbox_events_sent FROM %[2]s`, "INSERT", "outbox_events_sent", "DeleteSent", keepSent,
			func(c *dispatcher.Config) { c.DeleteSent, c.KeepSent = true, true }},
		{"DeleteOnSentDefault", `REVOKE DELETE ON outbox_events_sent_default FROM %[2]s`, "DELETE", "outbox_events_sent_default", "RetainSent",
			func(*dispatcher.Config) {}, keepSent},
		{"UpdateOnSentDefault", `REVOKE UPDATE ON outbox_events_sent_default FROM %[2]s`, "UPDATE", "outbox_events_sent_default", "RetainSent",
			func(*dispatcher.Config) {}, keepSent},
		{"SelectOnSentDefault", `REVOKE SELECT ON outbox_events_sent_default FROM %[2]s`, "SELECT", "outbox_events_sent_default", "RetainSent",
			func(*dispatcher.Config) {}, keepSent},
		{"DeleteOnDead", `REVOKE DELETE ON outbox_events_dead FROM %[2]s`, "DELETE", "outbox_events_dead", "RetainFailed",
			func(c *dispatcher.Config) { c.KeepSent, c.RetainFailed = true, time.Hour }, keepSent},
		// A move replaces the dead letter of the same id (ON CONFLICT DO
		// UPDATE), so every dispatcher needs UPDATE on the dead letters.
		{"UpdateOnDead", `REVOKE UPDATE ON outbox_events_dead FROM %[2]s`, "UPDATE", "outbox_events_dead", "dead letter of the same id",
			func(c *dispatcher.Config) { c.KeepSent, c.RetainFailed = true, time.Hour }, nil},
		{"ExecuteSentAdd", `REVOKE EXECUTE ON FUNCTION outbox_events_sent_add(timestamptz, timestamptz) FROM %[2]s`, "EXECUTE",
			"outbox_events_sent_add", "time partitions", keepSent, func(c *dispatcher.Config) { c.DeleteSent, c.KeepSent = true, true }},
		{"ExecuteSentDrop", `REVOKE EXECUTE ON FUNCTION outbox_events_sent_drop(timestamptz) FROM %[2]s`, "EXECUTE",
			"outbox_events_sent_drop", "RetainSent", func(*dispatcher.Config) {}, keepSent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewMigrated(t)
			role, _ := newGrantedRole(t, db, "pgotest_access", all+";\n"+tc.revoke)
			pool := db.RolePool(t, role, 4)
			cfg := baseConfig(db)
			tc.configure(&cfg)
			d, err := dispatcher.New(pool, cfg)
			require.NoError(t, err)
			err = d.Start(context.Background())
			require.ErrorIs(t, err, dispatcher.ErrMissingPrivilege)
			var pe *dispatcher.PrivilegeError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.privilege, pe.Privilege)
			require.Empty(t, pe.Columns, "granted on no column")
			require.Contains(t, err.Error(), tc.needs)
			if tc.privilege == "EXECUTE" {
				require.Empty(t, pe.Table)
				require.Contains(t, pe.Function, `."`+tc.table+`"(timestamptz`)
				require.Contains(t, err.Error(), "GRANT EXECUTE ON FUNCTION "+pe.Function)
			} else {
				require.Equal(t, db.Schema+"."+tc.table, pe.Table)
				require.Contains(t, err.Error(), "GRANT "+tc.privilege+" ON "+db.Schema+"."+tc.table)
			}
			if tc.allowed == nil {
				return
			}
			cfg = baseConfig(db)
			tc.allowed(&cfg)
			d, err = dispatcher.New(pool, cfg)
			require.NoError(t, err)
			require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
			runDispatcher(t, d)
			ids := insertEvents(t, db, "x", 1)
			waitFor(t, "the event delivered", func() bool {
				s, err := testdb.StatusOf(context.Background(), db.Pool, db.Table(), ids[0])
				require.NoError(t, err)
				return s == "SENT" || (s == "" && cfg.DeleteSent)
			})
		})
	}
}

// A grant of INSERT on some columns of the dead letters only (a column
// grant made before a column was added) is named column by column.
func TestStartNamesTheColumnsMissingOnDeadLetters(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	role, _ := newGrantedRole(t, db, "pgotest_dead_columns", `GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
GRANT SELECT, INSERT ON outbox_events_sent TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events_sent_default TO %[2]s;
GRANT SELECT ON outbox_events_dead TO %[2]s;
GRANT INSERT (id, seq, event_type) ON outbox_events_dead TO %[2]s`)
	cfg := baseConfig(db)
	cfg.KeepSent = true
	d, err := dispatcher.New(db.RolePool(t, role, 2), cfg)
	require.NoError(t, err)
	err = d.Start(context.Background())
	var pe *dispatcher.PrivilegeError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "INSERT", pe.Privilege)
	require.Equal(t, db.Schema+".outbox_events_dead", pe.Table)
	require.Contains(t, pe.Columns, "outcome_token")
	require.NotContains(t, pe.Columns, "seq")
	require.Contains(t, err.Error(), "GRANT INSERT (aggregate_type")
}
