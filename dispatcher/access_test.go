package dispatcher_test

import (
	"context"
	"strings"
	"testing"

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
GRANT SELECT ON outbox_events_schema_version TO %[2]s`, strings.Join(version8, ", "))

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
GRANT SELECT ON outbox_events_schema_version TO %[2]s`, strings.Join(granted, ", "))

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
