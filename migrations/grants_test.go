package migrations_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// roleEnv is an outbox set up as RenderGrants says: its schema created
// for the migrator, migrated by it, and a pool for each other role. The
// dispatcher role may delete when dispatcherDeletes (Roles.DispatcherDeletes).
type roleEnv struct {
	db    *testdb.DB
	cfg   migrations.Config
	roles migrations.Roles
	// super is a superuser connection, for looking and for changing grants.
	super                          *pgx.Conn
	producer, dispatcher, operator *pgxpool.Pool
}

const roleEventType = "role.test"

func newRoleEnv(t *testing.T, dispatcherDeletes bool) *roleEnv {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	env := &roleEnv{db: db, super: db.Conn(t)}
	// A schema that does not exist yet, so that BeforeMigrate creates it.
	env.cfg = migrations.Config{Table: outbox.Table{Schema: db.Schema + "_app", Name: outbox.DefaultTable}}
	env.roles = migrations.Roles{
		Migrator:   db.NewRole(t, "pgotest_migrator"),
		Producer:   db.NewRole(t, "pgotest_producer"),
		Dispatcher: db.NewRole(t, "pgotest_dispatcher"),
		Operator:   db.NewRole(t, "pgotest_operator"),

		DispatcherDeletes: dispatcherDeletes,
	}
	grants, err := migrations.RenderGrants(env.cfg, env.roles)
	require.NoError(t, err)
	mustExec(t, env.super, grants.BeforeMigrate)
	migrator := db.RoleConn(t, env.roles.Migrator)
	require.NoError(t, migrations.Migrate(ctx, migrator, env.cfg))
	mustExec(t, migrator, grants.AfterMigrate)

	env.producer = db.RolePool(t, env.roles.Producer, 2)
	env.dispatcher = db.RolePool(t, env.roles.Dispatcher, 8)
	env.operator = db.RolePool(t, env.roles.Operator, 2)
	return env
}

// emit commits n events as the producer: one INSERT, or COPY from
// 500 events on.
func (env *roleEnv) emit(ctx context.Context, n int) error {
	em, err := emitter.New(emitter.Config{Table: env.cfg.Table})
	if err != nil {
		return err
	}
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{Type: roleEventType, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`)}
	}
	return pgx.BeginFunc(ctx, env.producer, func(tx pgx.Tx) error {
		_, err := em.Emit(ctx, tx, events...)
		return err
	})
}

// pending counts the events still to deliver (PENDING or PROCESSING).
func (env *roleEnv) pending(t *testing.T) int {
	t.Helper()
	var n int
	err := env.super.QueryRow(context.Background(),
		"SELECT count(*) FROM "+quoted(env.cfg.Table)+" WHERE status IN ('PENDING', 'PROCESSING')").Scan(&n)
	require.NoError(t, err)
	return n
}

// dispatch runs a real dispatcher as the dispatcher role, handling every
// event with handler, until no event is left to deliver and no aged row
// is left (nil) or it reports its first error (which it returns).
func (env *roleEnv) dispatch(t *testing.T, deleteSent bool, handler outbox.Handler) error {
	t.Helper()
	reported := make(chan error, 1)
	d, err := dispatcher.New(env.dispatcher, dispatcher.Config{
		Table:        env.cfg.Table,
		PollInterval: 20 * time.Millisecond,
		DeleteSent:   deleteSent,
		KeepSent:     !env.roles.DispatcherDeletes, // no retention job without DELETE
		RetainFailed: retainFailed(env.roles.DispatcherDeletes),
		// A retention pass every 10ms: the run ends once the aged rows
		// are gone too.
		RetentionInterval: 10 * time.Millisecond,
		Backoff:           outbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Logger:            slog.New(slog.DiscardHandler),
		OnError: func(err error) {
			select {
			case reported <- err:
			default:
			}
		},
	})
	require.NoError(t, err)
	require.NoError(t, d.Handle(roleEventType, handler))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil { // already returned below, or the stop
			t.Logf("Run returned: %v", err)
		}
	}()
	budget := testctx.New(t)
	for {
		select {
		case err := <-reported:
			return err
		case err := <-ran:
			ran <- err // for the deferred wait
			require.Error(t, err, "Run returned before the events were delivered")
			return err
		case <-budget.Done():
			t.Fatalf("%d events still to deliver, %d aged rows left, and no error", env.pending(t), env.aged(t))
		case <-time.After(20 * time.Millisecond):
			if env.pending(t) == 0 && env.aged(t) == 0 {
				return nil
			}
		}
	}
}

func handled(context.Context, outbox.Event) error { return nil }

// refused fails every event for good: each becomes FAILED.
func refused(context.Context, outbox.Event) error { return outbox.Permanent(errors.New("refused")) }

// retainFailed is the dispatcher's RetainFailed: a day when it may
// delete, else keep FAILED rows.
func retainFailed(deletes bool) time.Duration {
	if deletes {
		return 24 * time.Hour
	}
	return 0
}

// aged counts the rows of ageOne that the dispatcher's retention job has
// not deleted yet, wherever they are.
func (env *roleEnv) aged(t *testing.T) int {
	t.Helper()
	var n int
	err := env.super.QueryRow(context.Background(), "SELECT count(*) FROM "+testdb.AllRows(env.cfg.Table)+
		" AS e WHERE event_type = 'aged'").Scan(&n)
	require.NoError(t, err)
	return n
}

// ageOne commits one row with status SENT or FAILED that finished two
// days ago, in the history or the dead letters, for the dispatcher's
// retention job to delete (the defaults keep SENT rows a day, and
// dispatch keeps FAILED rows a day).
func (env *roleEnv) ageOne(t *testing.T, status outbox.Status) {
	t.Helper()
	into, column := suffixedTable(env.cfg.Table, "_sent"), "sent_at"
	if status == outbox.StatusFailed {
		into, column = suffixedTable(env.cfg.Table, "_dead"), "failed_at"
	}
	mustExec(t, env.super, "INSERT INTO "+into+" (id, seq, event_type, status, "+column+
		") VALUES (gen_random_uuid(), 1000000, 'aged', $1, now() - interval '2 days')", string(status))
}

// suffixedTable is the quoted name of the outbox's table with suffix.
func suffixedTable(table outbox.Table, suffix string) string {
	return pgx.Identifier{table.Schema, table.Name + suffix}.Sanitize()
}

// operate runs every admin call an operator makes, and the version and
// verify checks of outboxctl, returning the first error.
func (env *roleEnv) operate(ctx context.Context) error {
	a, err := admin.New(env.operator, admin.Config{Table: env.cfg.Table})
	if err != nil {
		return err
	}
	return errors.Join(
		func() error { _, err := a.Counts(ctx); return err }(),
		func() error { _, err := a.Summary(ctx); return err }(),
		func() error { _, err := a.List(ctx, admin.ListParams{}); return err }(),
		func() error {
			_, err := a.Replay(ctx, admin.ReplayParams{Type: roleEventType, Actor: &admin.Actor{Name: "ops", Source: admin.SourceAdmin}})
			return err
		}(),
		func() error { _, err := a.AuditLog(ctx, admin.AuditParams{}); return err }(),
		func() error { _, err := a.Purge(ctx, admin.PurgeParams{Status: outbox.StatusFailed}); return err }(),
		func() error { _, err := a.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent}); return err }(),
		func() error {
			_, err := a.SkipHeads(ctx, admin.SkipParams{IDs: []uuid.UUID{uuid.New()}})
			if errors.Is(err, admin.ErrNotSkippable) {
				return nil // no such event: the statement ran
			}
			return err
		}(),
		func() error { _, err := migrations.Version(ctx, env.operator, env.cfg); return err }(),
		migrations.Verify(ctx, env.operator, env.cfg),
	)
}

// Each role set up by RenderGrants does its work: the producer emits one
// event and a batch written with COPY, a dispatcher connected as the
// dispatcher role delivers them all, and fails three more for good, and
// the operator runs the admin calls, replaying the FAILED events, which
// the dispatcher then delivers.
func TestGrantsLetEachRoleWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newRoleEnv(t, false)

	require.NoError(t, env.emit(ctx, 1), "single event")
	require.NoError(t, env.emit(ctx, 5000), "a batch the emitter writes with COPY")
	require.Equal(t, 5001, env.pending(t))
	require.NoError(t, env.dispatch(t, false, handled))
	require.NoError(t, env.emit(ctx, 3))
	require.NoError(t, env.dispatch(t, false, refused))
	n, err := testdb.CountStatus(ctx, env.super, env.cfg.Table, outbox.StatusFailed)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	require.NoError(t, env.operate(ctx))
	require.Equal(t, 3, env.pending(t), "replayed to PENDING")
	require.NoError(t, env.dispatch(t, false, handled))
	n, err = testdb.CountStatus(ctx, env.super, env.cfg.Table, outbox.StatusSent)
	require.NoError(t, err)
	require.Equal(t, 5004, n, "the replayed events and the 5,001 sent before: they are in the history's partition of now, "+
		"which the operator's purge (whole partitions older than the cut-off) leaves")

	// The operator writes audit rows but not their time or number: the
	// database stamps them, so a row cannot be backdated.
	audit := suffixedTable(env.cfg.Table, "_audit")
	for _, col := range []string{"at", "id"} {
		_, err = env.operator.Exec(ctx, `INSERT INTO `+audit+` (actor, source, action, filter, rows, `+col+`)
			OVERRIDING SYSTEM VALUE VALUES ('x', 'admin', 'replay', '{}', 0, DEFAULT)`)
		requirePrivilegeError(t, err, "an operator setting the audit's %s", col)
	}
}

// The dispatcher's role cannot create tables: not in the outbox schema,
// not in public.
func TestGrantsDispatcherCannotCreateTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newRoleEnv(t, false)
	for _, schema := range []string{env.cfg.Table.Schema, "public"} {
		_, err := env.dispatcher.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "pgotest_intruder"}.Sanitize()+" ()")
		requirePrivilegeError(t, err, schema)
	}
}

// requirePrivilegeError checks that err is PostgreSQL's
// insufficient_privilege.
func requirePrivilegeError(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, msgAndArgs...)
	require.Equal(t, "42501", pgErr.Code, msgAndArgs...)
}

// A dispatcher also works with UPDATE granted on the columns it writes
// only, through success, retry and snooze.
func TestGrantsDispatcherWithColumnUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newRoleEnv(t, false)
	table, role := quoted(env.cfg.Table), pgx.Identifier{env.roles.Dispatcher}.Sanitize()
	mustExec(t, env.super, "REVOKE UPDATE ON "+table+" FROM "+role)
	mustExec(t, env.super, "GRANT UPDATE ("+strings.Join(dispatcherColumns, ", ")+") ON "+table+" TO "+role)
	require.NoError(t, env.emit(ctx, 20))

	var calls atomic.Int64
	flaky := func(context.Context, outbox.Event) error {
		switch calls.Add(1) % 3 {
		case 1:
			return errors.New("try again")
		case 2:
			return outbox.Snooze(time.Millisecond)
		}
		return nil
	}
	require.NoError(t, env.dispatch(t, false, flaky))
	require.NoError(t, env.dispatch(t, false, handled), "nothing left")
	n, err := testdb.CountStatus(ctx, env.super, env.cfg.Table, outbox.StatusSent)
	require.NoError(t, err)
	require.Equal(t, 20, n)
}

// dispatcherColumns are the columns the dispatcher's statements write,
// as docs/operations.md lists them.
var dispatcherColumns = []string{
	"status", "attempts", "recoveries", "snoozes", "next_attempt_at", "lock_token", "lock_owner",
	"locked_at", "lease_until", "heartbeat_at", "started_at", "sent_at", "failed_at",
	"last_error_code", "last_error", "attempt_log", "outcome_token",
}

// Every privilege RenderGrants gives (DispatcherDeletes on) is needed:
// with any one of them revoked, the role's work fails (and works again
// once it is back).
func TestGrantsAreMinimal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newRoleEnv(t, true)
	schema, table := "SCHEMA "+pgx.Identifier{env.cfg.Table.Schema}.Sanitize(), "TABLE "+quoted(env.cfg.Table)
	version := "TABLE " + suffixedTable(env.cfg.Table, "_schema_version")
	dead, sent := "TABLE "+suffixedTable(env.cfg.Table, "_dead"), "TABLE "+suffixedTable(env.cfg.Table, "_sent")
	sentDefault := "TABLE " + suffixedTable(env.cfg.Table, "_sent_default")
	audit := "TABLE " + suffixedTable(env.cfg.Table, "_audit")
	sentAdd := "FUNCTION " + suffixedTable(env.cfg.Table, "_sent_add") + "(timestamptz, timestamptz)"
	sentDrop := "FUNCTION " + suffixedTable(env.cfg.Table, "_sent_drop") + "(timestamptz)"
	emitOne := func() error { return env.emit(ctx, 1) }
	emitCopy := func() error { return env.emit(ctx, 5000) }
	dispatch := func(deleteSent bool) func() error {
		return func() error {
			require.NoError(t, env.emit(ctx, 1), "an event to dispatch")
			return env.dispatch(t, deleteSent, handled)
		}
	}
	fail := func() error {
		require.NoError(t, env.emit(ctx, 1), "an event to fail")
		return env.dispatch(t, false, refused)
	}
	retain := func(status outbox.Status) func() error {
		return func() error {
			env.ageOne(t, status)
			return env.dispatch(t, false, handled)
		}
	}
	operate := func() error { return env.operate(ctx) }
	tests := []struct {
		privilege, object, role string
		work                    func() error
	}{
		{"USAGE", schema, env.roles.Producer, emitOne},
		{"INSERT", table, env.roles.Producer, emitOne},
		{"INSERT", table, env.roles.Producer, emitCopy},
		{"USAGE", schema, env.roles.Dispatcher, dispatch(false)},
		{"SELECT", table, env.roles.Dispatcher, dispatch(false)},
		{"UPDATE", table, env.roles.Dispatcher, dispatch(false)},
		{"DELETE", table, env.roles.Dispatcher, dispatch(false)},
		{"DELETE", table, env.roles.Dispatcher, dispatch(true)},
		{"SELECT", version, env.roles.Dispatcher, dispatch(false)},
		{"SELECT", sent, env.roles.Dispatcher, dispatch(false)},
		{"INSERT", sent, env.roles.Dispatcher, dispatch(false)},
		{"SELECT", dead, env.roles.Dispatcher, fail},
		{"INSERT", dead, env.roles.Dispatcher, fail},
		{"UPDATE", dead, env.roles.Dispatcher, fail},
		{"SELECT", sentDefault, env.roles.Dispatcher, retain(outbox.StatusSent)},
		{"UPDATE", sentDefault, env.roles.Dispatcher, retain(outbox.StatusSent)},
		{"DELETE", sentDefault, env.roles.Dispatcher, retain(outbox.StatusSent)},
		{"UPDATE", dead, env.roles.Dispatcher, retain(outbox.StatusFailed)},
		{"EXECUTE", sentAdd, env.roles.Dispatcher, dispatch(false)},
		{"EXECUTE", sentDrop, env.roles.Dispatcher, retain(outbox.StatusSent)},
		{"DELETE", dead, env.roles.Dispatcher, retain(outbox.StatusFailed)},
		{"USAGE", schema, env.roles.Operator, operate},
		{"SELECT", table, env.roles.Operator, operate},
		{"INSERT", table, env.roles.Operator, operate},
		{"SELECT", dead, env.roles.Operator, operate},
		{"UPDATE", dead, env.roles.Operator, operate},
		{"DELETE", dead, env.roles.Operator, operate},
		{"SELECT", sent, env.roles.Operator, operate},
		{"SELECT", sentDefault, env.roles.Operator, operate},
		{"UPDATE", sentDefault, env.roles.Operator, operate},
		{"DELETE", sentDefault, env.roles.Operator, operate},
		{"SELECT", version, env.roles.Operator, operate},
		{"EXECUTE", sentDrop, env.roles.Operator, operate},
		{"SELECT", audit, env.roles.Operator, operate},
		{"INSERT", audit, env.roles.Operator, operate},
	}
	for _, tt := range tests {
		on := tt.privilege + " ON " + tt.object + " TO/FROM " + tt.role
		require.NoError(t, tt.work(), "with every grant: %s", on)
		role := pgx.Identifier{tt.role}.Sanitize()
		mustExec(t, env.super, "REVOKE "+tt.privilege+" ON "+tt.object+" FROM "+role)
		require.Error(t, tt.work(), "without %s", on)
		mustExec(t, env.super, "GRANT "+tt.privilege+" ON "+tt.object+" TO "+role)
	}
}

// The migrator of an existing schema it does not own (public, say) needs
// USAGE and CREATE on it, as BeforeMigrate grants, and nothing on the
// database: without either, Migrate fails.
func TestGrantsMigratorOfAnExistingSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cfg := migrations.Config{Table: db.Table()}
	roles := migrations.Roles{Migrator: db.NewRole(t, "pgotest_migrator")}
	grants, err := migrations.RenderGrants(cfg, roles)
	require.NoError(t, err)
	super := db.Conn(t)
	mustExec(t, super, grants.BeforeMigrate)
	migrator := db.RoleConn(t, roles.Migrator)
	schema, role := pgx.Identifier{db.Schema}.Sanitize(), pgx.Identifier{roles.Migrator}.Sanitize()

	for _, privilege := range []string{"USAGE", "CREATE"} {
		mustExec(t, super, "REVOKE "+privilege+" ON SCHEMA "+schema+" FROM "+role)
		requirePrivilegeError(t, migrations.Migrate(ctx, migrator, cfg), "without "+privilege)
		mustExec(t, super, "GRANT "+privilege+" ON SCHEMA "+schema+" TO "+role)
	}
	require.NoError(t, migrations.Migrate(ctx, migrator, cfg))
	mustExec(t, migrator, grants.AfterMigrate)
	require.NoError(t, migrations.Verify(ctx, migrator, cfg))
}

func TestRenderGrantsRejectsBadInput(t *testing.T) {
	t.Parallel()
	_, err := migrations.RenderGrants(migrations.Config{Table: outbox.Table{Schema: "Bad"}}, migrations.Roles{})
	require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)
	_, err = migrations.RenderGrants(migrations.Config{}, migrations.Roles{Operator: strings.Repeat("r", 64)})
	var inputErr *outbox.InputError
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "Roles.Operator", inputErr.Field)
}

// DispatcherDeletes alone decides whether the dispatcher gets what its
// retention needs: DELETE (and UPDATE, to lock) on the dead letters and
// the history's default partition. It always gets DELETE on the outbox
// table, where every success and FAILED outcome deletes its row, and
// never DELETE on the history itself.
func TestRenderGrantsDispatcherDeletes(t *testing.T) {
	t.Parallel()
	for _, deletes := range []bool{false, true} {
		g, err := migrations.RenderGrants(migrations.Config{}, migrations.Roles{Dispatcher: "d", DispatcherDeletes: deletes})
		require.NoError(t, err)
		require.Contains(t, g.AfterMigrate, `GRANT SELECT, UPDATE, DELETE ON TABLE "public"."outbox_events" TO "d";`)
		require.Contains(t, g.AfterMigrate, `GRANT SELECT, INSERT ON TABLE "public"."outbox_events_sent" TO "d";`)
		for _, table := range []string{"outbox_events_dead", "outbox_events_sent_default"} {
			require.Equal(t, deletes, strings.Contains(g.AfterMigrate, `UPDATE, DELETE ON TABLE "public"."`+table+`"`),
				"DispatcherDeletes %v, %s", deletes, table)
		}
	}
}

// docs/operations.md shows what RenderGrants writes for its example.
func TestGrantsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	grants, err := migrations.RenderGrants(migrations.Config{Table: outbox.Table{Schema: "app"}}, migrations.Roles{
		Migrator: "outbox_migrator", Producer: "outbox_producer", Dispatcher: "outbox_dispatcher", Operator: "outbox_operator",
		DispatcherDeletes: true,
	})
	require.NoError(t, err)
	require.Contains(t, string(doc), grants.BeforeMigrate+"\n"+grants.AfterMigrate)
}
