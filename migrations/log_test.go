package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// logConfig is the Config of a log named event_log in db's schema.
func logConfig(db *testdb.DB) migrations.Config {
	return migrations.Config{Table: outbox.Table{Schema: db.Schema, Name: "event_log"}, Kind: outbox.KindLog}
}

// logRelations lists the relations of schema that are not parts of the
// log (whose names hold the xid they start at), sorted by name, with
// their kind.
func logRelations(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT c.relname::text || ':' || c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'i', 'I') AND NOT c.relispartition ORDER BY 1`, schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// wantLogRelations are the relations a migrated log event_log has, its
// parts apart.
var wantLogRelations = []string{
	"event_log:p", "event_log_cursors:r", "event_log_cursors_pkey:i", "event_log_parked:r",
	"event_log_parked_key_idx:i", "event_log_parked_keys:r", "event_log_parked_keys_pkey:i", "event_log_parked_pkey:i",
	"event_log_schema_version:r", "event_log_ticker:r", "event_log_ticker_pkey:i", "event_log_ticks:r",
	"event_log_ticks_pkey:i", "event_log_xid_idx:I",
}

// countParts counts the parts attached to the log.
func countParts(t *testing.T, conn *pgx.Conn, cfg migrations.Config) int {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`,
		quoted(cfg.Table)).Scan(&n)
	require.NoError(t, err)
	return n
}

func TestLogMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := logConfig(db)

	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Zero(t, v)
	for range 2 { // the second finds nothing to do
		require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	}
	v, err = migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Equal(t, migrations.LatestLog(), v)
	require.Equal(t, migrations.LatestLog(), migrations.LatestFor(outbox.KindLog))
	require.Equal(t, migrations.Latest(), migrations.LatestFor(outbox.KindOutbox))
	require.Equal(t, wantLogRelations, logRelations(t, conn, db.Schema))
	require.Equal(t, 16, countParts(t, conn, cfg), "16 parts ahead, created once")
	var ticks, next int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+suffixed(quoted(cfg.Table), "_ticks")+` WHERE tick_id = 1),
		(SELECT next_tick FROM `+suffixed(quoted(cfg.Table), "_ticker")+`)`).Scan(&ticks, &next))
	require.Equal(t, []int{1, 2}, []int{ticks, next}, "the baseline tick and the ticker row")
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	// An outbox beside it, in the same schema, versions on its own.
	out := migrations.Config{Table: db.Table()}
	require.NoError(t, migrations.Migrate(ctx, conn, out))
	require.NoError(t, migrations.Verify(ctx, conn, out))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
}

// A log verified as an outbox, or an outbox as a log, gives one problem
// that says so, not a diff per column.
func TestVerifyWrongKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	log := logConfig(db)
	require.NoError(t, migrations.Migrate(ctx, conn, log))
	out := migrations.Config{Table: db.Table()}
	require.NoError(t, migrations.Migrate(ctx, conn, out))

	asOutbox := log
	asOutbox.Kind = outbox.KindOutbox
	requireOneProblem(t, migrations.Verify(ctx, conn, asOutbox), "table is a log, not an outbox")
	asLog := out
	asLog.Kind = outbox.KindLog
	requireOneProblem(t, migrations.Verify(ctx, conn, asLog), "table is an outbox, not a log")
}

// requireOneProblem checks that err is a VerifyError of one problem
// whose text holds want.
func requireOneProblem(t *testing.T, err error, want string) {
	t.Helper()
	var verr *migrations.VerifyError
	require.ErrorAs(t, err, &verr)
	require.Len(t, verr.Problems, 1, "%v", verr)
	require.Contains(t, verr.Problems[0].String(), want)
	require.ErrorIs(t, err, outbox.ErrSchemaMismatch)
}

// Verify of a log finds each drift: a dropped index, a default
// partition, no part for new transactions, a changed xid default, a
// missing function, the ticks gone.
func TestVerifyLogDrift(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// breakSQL damages the log: %[1]s is the quoted log, %[2]s its
		// quoted schema, %[3]s its quoted ticks; in object, %[2]s is the
		// unquoted schema.
		breakSQL []string
		object   string // the Object of the problem expected among them
		actual   string // what its Actual holds
	}{
		{"DroppedIndex", []string{`DROP INDEX %[2]s.event_log_xid_idx`}, "index %[2]s.event_log_xid_idx", "missing"},
		{"DefaultPartition", []string{`CREATE TABLE %[2]s.event_log_default PARTITION OF %[1]s DEFAULT`},
			"default partition of %[2]s.event_log", "event_log_default"},
		{"NoPartForNewTransactions", nil, "partitions of %[2]s.event_log", "no partition for new transactions"},
		{"XidDefault", []string{`ALTER TABLE %[1]s ALTER COLUMN xid SET DEFAULT '1'::xid8`},
			"column %[2]s.event_log.xid", "DEFAULT '1'::xid8"},
		{"SeqNotIdentity", []string{`ALTER TABLE %[1]s ALTER COLUMN seq DROP IDENTITY`}, "column %[2]s.event_log.seq", "bigint NOT NULL"},
		{"PartitionKey", []string{`DROP TABLE %[1]s`, `CREATE TABLE %[1]s (LIKE %[2]s.event_log_parked) PARTITION BY LIST (xid)`},
			"partition key of %[2]s.event_log", "LIST (xid)"},
		{"MissingFunction", []string{`DROP FUNCTION %[2]s.event_log_part_add`}, "function %[2]s.event_log_part_add", "missing"},
		{"NoTicks", []string{`DELETE FROM %[3]s`}, "ticks of %[2]s.event_log", "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			conn := db.Conn(t)
			cfg := logConfig(db)
			require.NoError(t, migrations.Migrate(ctx, conn, cfg))
			require.NoError(t, migrations.Verify(ctx, conn, cfg))
			schema := pgx.Identifier{db.Schema}.Sanitize()
			steps := tt.breakSQL
			if tt.name == "NoPartForNewTransactions" {
				steps = detachAll(t, conn, cfg)
			}
			for _, s := range steps {
				mustExec(t, conn, fmt.Sprintf(s, quoted(cfg.Table), schema, suffixed(quoted(cfg.Table), "_ticks")))
			}
			err := migrations.Verify(ctx, conn, cfg)
			var verr *migrations.VerifyError
			require.ErrorAs(t, err, &verr)
			object := fmt.Sprintf(tt.object, quoted(cfg.Table), db.Schema)
			i := slices.IndexFunc(verr.Problems, func(p migrations.Problem) bool { return p.Object == object })
			require.GreaterOrEqual(t, i, 0, "no problem for %s in %v", object, verr)
			require.Contains(t, verr.Problems[i].Actual, tt.actual)
		})
	}
}

// detachAll returns the statements that detach every part of the log.
func detachAll(t *testing.T, conn *pgx.Conn, cfg migrations.Config) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = $1::regclass`,
		quoted(cfg.Table))
	require.NoError(t, err)
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, parts)
	var steps []string
	for _, p := range parts {
		steps = append(steps, "ALTER TABLE %[1]s DETACH PARTITION "+p)
	}
	return steps
}

// Render's files for a log give what Migrate gives: applied by hand they
// verify, a later Migrate finds nothing to do, and the down file leaves
// the version table alone at version 0.
func TestRenderLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := logConfig(db)
	files, err := migrations.Render(cfg)
	require.NoError(t, err)
	names, err := fs.Glob(files, "*")
	require.NoError(t, err)
	var want []string
	for v := range migrations.LatestLog() {
		matches, err := fs.Glob(migrations.LogFS, fmt.Sprintf("%03d_*.sql", v+1))
		require.NoError(t, err)
		require.Len(t, matches, 1)
		base := strings.TrimSuffix(matches[0], ".sql")
		want = append(want, base+".down.sql", base+".up.sql")
	}
	require.Equal(t, want, names)
	read := func(name string) string {
		text, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		require.NotContains(t, string(text), "{{")
		return string(text)
	}
	for i := 1; i < len(want); i += 2 {
		mustExec(t, conn, read(want[i]))
	}
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	require.Equal(t, wantLogRelations, logRelations(t, conn, db.Schema), "as Migrate leaves them")
	require.Equal(t, 16, countParts(t, conn, cfg))
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.Equal(t, 16, countParts(t, conn, cfg), "Migrate found nothing to do")
	for i := len(want) - 2; i >= 0; i -= 2 {
		mustExec(t, conn, read(want[i]))
	}
	require.Equal(t, []string{"event_log_schema_version"}, tablesIn(t, conn, db.Schema))
	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Zero(t, v)
	var verr *migrations.VerifyError
	require.ErrorAs(t, migrations.Verify(ctx, conn, cfg), &verr)
}

// logRoles is a log set up as RenderGrants says, with a pool per role.
type logRoles struct {
	cfg                     migrations.Config
	roles                   migrations.Roles
	super                   *pgx.Conn
	producer, relay, operat *pgx.Conn
}

func newLogRoles(t *testing.T) *logRoles {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	env := &logRoles{super: db.Conn(t)}
	env.cfg = migrations.Config{Table: outbox.Table{Schema: db.Schema + "_log", Name: "event_log"}, Kind: outbox.KindLog}
	env.roles = migrations.Roles{
		Migrator: db.NewRole(t, "pgotest_migrator"),
		Producer: db.NewRole(t, "pgotest_producer"),
		Relay:    db.NewRole(t, "pgotest_relay"),
		Operator: db.NewRole(t, "pgotest_operator"),
	}
	grants, err := migrations.RenderGrants(env.cfg, env.roles)
	require.NoError(t, err)
	mustExec(t, env.super, grants.BeforeMigrate)
	t.Cleanup(func() {
		_, _ = env.super.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{env.cfg.Table.Schema}.Sanitize()+" CASCADE")
	})
	migrator := db.RoleConn(t, env.roles.Migrator)
	require.NoError(t, migrations.Migrate(ctx, migrator, env.cfg))
	mustExec(t, migrator, grants.AfterMigrate)
	env.producer = db.RoleConn(t, env.roles.Producer)
	env.relay = db.RoleConn(t, env.roles.Relay)
	env.operat = db.RoleConn(t, env.roles.Operator)
	return env
}

// emit commits n events into the log as the producer (COPY from 500).
func (env *logRoles) emit(ctx context.Context, n int) error {
	em, err := emitter.New(emitter.Config{Table: env.cfg.Table, Kind: outbox.KindLog})
	if err != nil {
		return err
	}
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{Type: "log.test", Payload: []byte(`{}`)}
	}
	return pgx.BeginFunc(ctx, env.producer, func(tx pgx.Tx) error {
		_, err := em.Emit(ctx, tx, events...)
		return err
	})
}

// The roles of a log work with the grants of RenderGrants alone: the
// producer emits (INSERT and COPY) into parts it has no grant on; the
// relay reads the log (every part, one added after the grants too) and
// the ticks, takes the ticker's lease row, writes cursors and parked
// rows, adds a part and is refused a bad bound; the operator reads; and
// each of them verifies the log. Without the producer's INSERT, Emit
// fails.
func TestLogGrantsLetEachRoleWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newLogRoles(t)
	names, err := sqlname.For(env.cfg.Table)
	require.NoError(t, err)
	require.NoError(t, env.emit(ctx, 3))
	require.NoError(t, env.emit(ctx, 5000))

	var rows, ticks int
	require.NoError(t, env.relay.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+names.Qualified+"), (SELECT count(*) FROM "+
		names.Log(sqlname.SuffixTicks)+")").Scan(&rows, &ticks))
	require.Equal(t, []int{5003, 1}, []int{rows, ticks})

	// A part far ahead, added by the relay after the grants, takes rows
	// (the migrator routes one there by a forced xid) that the relay and
	// the operator read through the log.
	far := uint64(1<<40) / sqlname.LogPartXids * sqlname.LogPartXids
	var added bool
	require.NoError(t, env.relay.QueryRow(ctx, "SELECT "+names.Function(sqlname.SuffixPartAdd)+"($1::text::xid8)",
		fmt.Sprint(far)).Scan(&added))
	require.True(t, added)
	mustExec(t, env.super, "INSERT INTO "+names.Qualified+" (xid, id, event_type) VALUES ($1::text::xid8, gen_random_uuid(), 'far')",
		fmt.Sprint(far+1))
	for _, c := range []*pgx.Conn{env.relay, env.operat} {
		var n int
		require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM "+names.Qualified+" WHERE event_type = 'far'").Scan(&n))
		require.Equal(t, 1, n)
	}
	_, err = env.relay.Exec(ctx, "SELECT "+names.Function(sqlname.SuffixPartAdd)+"($1::text::xid8)", fmt.Sprint(far+1))
	require.Equal(t, "22023", pgerr.Code(err), "a bound that is not a multiple of the part width: %v", err)

	mustExec(t, env.relay, "UPDATE "+names.Log(sqlname.SuffixTicker)+" SET owner = 'r', token = gen_random_uuid(), lease_until = now() + interval '1 minute'")
	mustExec(t, env.relay, "INSERT INTO "+names.Log(sqlname.SuffixCursors)+" (grp, last_tick) VALUES ('g', 1)")
	mustExec(t, env.relay, "UPDATE "+names.Log(sqlname.SuffixCursors)+" SET last_tick = 1 WHERE grp = 'g'")
	mustExec(t, env.relay, "INSERT INTO "+names.Log(sqlname.SuffixParkedKeys)+" (grp, key) VALUES ('g', 'k')")
	mustExec(t, env.relay, "INSERT INTO "+names.Log(sqlname.SuffixParked)+
		" (grp, seq, xid, id, event_type, created_at, key) SELECT 'g', seq, xid, id, event_type, created_at, 'k' FROM "+
		names.Qualified+" LIMIT 1")
	mustExec(t, env.operat, "DELETE FROM "+names.Log(sqlname.SuffixParked)+" WHERE grp = 'g'")
	mustExec(t, env.operat, "DELETE FROM "+names.Log(sqlname.SuffixParkedKeys)+" WHERE grp = 'g'")
	mustExec(t, env.relay, "DELETE FROM "+names.Log(sqlname.SuffixCursors)+" WHERE grp = 'g'")

	for _, c := range []*pgx.Conn{env.relay, env.operat, env.super} {
		require.NoError(t, migrations.Verify(ctx, c, env.cfg))
	}
	_, err = env.producer.Exec(ctx, "SELECT count(*) FROM "+names.Qualified)
	requirePrivilegeError(t, err, "the producer only inserts")
	_, err = env.relay.Exec(ctx, "INSERT INTO "+names.Log(sqlname.SuffixTicks)+" (tick_id, snapshot, last_seq, sysid) VALUES (9, pg_current_snapshot(), 0, 0)")
	requirePrivilegeError(t, err, "ticks are written by the tick function only")

	role := pgx.Identifier{env.roles.Producer}.Sanitize()
	mustExec(t, env.super, "REVOKE INSERT ON "+names.Qualified+" FROM "+role)
	requirePrivilegeError(t, env.emit(ctx, 1), "without INSERT on the log")
}

func TestRenderGrantsLog(t *testing.T) {
	t.Parallel()
	cfg := migrations.Config{Table: outbox.Table{Schema: "app", Name: "events"}, Kind: outbox.KindLog}
	g, err := migrations.RenderGrants(cfg, migrations.Roles{Producer: "p", Relay: "r", Operator: "o"})
	require.NoError(t, err)
	require.Contains(t, g.AfterMigrate, `GRANT INSERT ON TABLE "app"."events" TO "p";`)
	require.Contains(t, g.AfterMigrate, `GRANT SELECT ON TABLE "app"."events", "app"."events_ticks", "app"."events_schema_version" TO "r";`)
	require.Contains(t, g.AfterMigrate, `GRANT SELECT, UPDATE ON TABLE "app"."events_ticker" TO "r";`)
	require.Contains(t, g.AfterMigrate, `GRANT EXECUTE ON FUNCTION "app"."events_part_add"(xid8) TO "r";`)
	require.Contains(t, g.BeforeMigrate, `GRANT USAGE ON SCHEMA "app" TO "r";`)

	_, err = migrations.RenderGrants(cfg, migrations.Roles{Dispatcher: "d"})
	var input *outbox.InputError
	require.ErrorAs(t, err, &input)
	require.Equal(t, "Roles.Dispatcher", input.Field)
	_, err = migrations.RenderGrants(migrations.Config{}, migrations.Roles{Relay: "r"})
	require.ErrorAs(t, err, &input)
	require.Equal(t, "Roles.Relay", input.Field)
	_, err = migrations.RenderGrants(migrations.Config{Kind: 9}, migrations.Roles{})
	require.ErrorIs(t, err, outbox.ErrInvalidConfig)
}

// logGrant is one privilege of a role and work that needs it.
type logGrant struct {
	privilege, object, role string
	work                    func() error
}

// Every privilege RenderGrants gives the roles of a log is needed: with
// any one of them revoked, the role's work fails (and works again once it
// is back).
func TestLogGrantsAreMinimal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newLogRoles(t)
	n, err := sqlname.For(env.cfg.Table)
	require.NoError(t, err)
	schema := "SCHEMA " + pgx.Identifier{env.cfg.Table.Schema}.Sanitize()
	log, version := "TABLE "+n.Qualified, "TABLE "+n.VersionTable
	ticks, ticker := "TABLE "+n.Log(sqlname.SuffixTicks), "TABLE "+n.Log(sqlname.SuffixTicker)
	cursors, keys, parked := "TABLE "+n.Log(sqlname.SuffixCursors), "TABLE "+n.Log(sqlname.SuffixParkedKeys), "TABLE "+n.Log(sqlname.SuffixParked)
	partAdd := "FUNCTION " + n.Function(sqlname.SuffixPartAdd) + "(xid8)"
	exec := func(c *pgx.Conn, sql string) func() error {
		return func() error {
			_, err := c.Exec(ctx, sql)
			return err
		}
	}
	// groupWork writes and reads a group's rows as role c, leaving none.
	groupWork := func(c *pgx.Conn, stmts ...string) func() error {
		return func() error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				for _, s := range stmts {
					if _, err := tx.Exec(ctx, s); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	insertCursor := "INSERT INTO " + n.Log(sqlname.SuffixCursors) + " (grp, last_tick) VALUES ('m', 1)"
	insertKey := "INSERT INTO " + n.Log(sqlname.SuffixParkedKeys) + " (grp, key) VALUES ('m', 'k')"
	insertParked := "INSERT INTO " + n.Log(sqlname.SuffixParked) + " (grp, seq, xid, id, event_type, created_at) VALUES ('m', 1, '1', gen_random_uuid(), 't', now())"
	far := fmt.Sprint(uint64(1<<41) / sqlname.LogPartXids * sqlname.LogPartXids)
	tests := []logGrant{
		{"USAGE", schema, env.roles.Producer, func() error { return env.emit(ctx, 1) }},
		{"INSERT", log, env.roles.Producer, func() error { return env.emit(ctx, 1) }},
		{"INSERT", log, env.roles.Producer, func() error { return env.emit(ctx, 5000) }},
	}
	for _, r := range []struct {
		role string
		conn *pgx.Conn
	}{{env.roles.Relay, env.relay}, {env.roles.Operator, env.operat}} {
		tests = append(tests, []logGrant{
			{"USAGE", schema, r.role, exec(r.conn, "SELECT count(*) FROM "+n.Log(sqlname.SuffixTicks))},
			{"SELECT", log, r.role, exec(r.conn, "SELECT count(*) FROM "+n.Qualified)},
			{"SELECT", ticks, r.role, exec(r.conn, "SELECT count(*) FROM "+n.Log(sqlname.SuffixTicks))},
			{"SELECT", version, r.role, func() error { return migrations.Verify(ctx, r.conn, env.cfg) }},
			{"SELECT", ticker, r.role, exec(r.conn, "SELECT * FROM "+n.Log(sqlname.SuffixTicker))},
			{"INSERT", cursors, r.role, groupWork(r.conn, insertCursor, "DELETE FROM "+n.Log(sqlname.SuffixCursors))},
			{"SELECT", cursors, r.role, exec(r.conn, "SELECT count(*) FROM "+n.Log(sqlname.SuffixCursors))},
			{"UPDATE", cursors, r.role, exec(r.conn, "UPDATE "+n.Log(sqlname.SuffixCursors)+" SET batch_tick = NULL")},
			{"DELETE", cursors, r.role, exec(r.conn, "DELETE FROM "+n.Log(sqlname.SuffixCursors))},
			{"INSERT", keys, r.role, groupWork(r.conn, insertKey, "DELETE FROM "+n.Log(sqlname.SuffixParkedKeys))},
			{"SELECT", keys, r.role, exec(r.conn, "SELECT count(*) FROM "+n.Log(sqlname.SuffixParkedKeys))},
			{"UPDATE", keys, r.role, exec(r.conn, "UPDATE "+n.Log(sqlname.SuffixParkedKeys)+" SET replay_requested_at = NULL")},
			{"DELETE", keys, r.role, exec(r.conn, "DELETE FROM "+n.Log(sqlname.SuffixParkedKeys))},
			{"INSERT", parked, r.role, groupWork(r.conn, insertParked, "DELETE FROM "+n.Log(sqlname.SuffixParked))},
			{"SELECT", parked, r.role, exec(r.conn, "SELECT count(*) FROM "+n.Log(sqlname.SuffixParked))},
			{"UPDATE", parked, r.role, exec(r.conn, "UPDATE "+n.Log(sqlname.SuffixParked)+" SET error = NULL")},
			{"DELETE", parked, r.role, exec(r.conn, "DELETE FROM "+n.Log(sqlname.SuffixParked))},
			{"EXECUTE", partAdd, r.role, exec(r.conn, "SELECT "+n.Function(sqlname.SuffixPartAdd)+"('"+far+"')")},
		}...)
	}
	tests = append(tests, logGrant{"UPDATE", ticker, env.roles.Relay, exec(env.relay, "UPDATE "+n.Log(sqlname.SuffixTicker)+" SET heartbeat_at = now()")})

	for _, tt := range tests {
		on := tt.privilege + " ON " + tt.object + " TO/FROM " + tt.role
		require.NoError(t, tt.work(), "with every grant: %s", on)
		role := pgx.Identifier{tt.role}.Sanitize()
		mustExec(t, env.super, "REVOKE "+tt.privilege+" ON "+tt.object+" FROM "+role)
		require.Error(t, tt.work(), "without %s", on)
		mustExec(t, env.super, "GRANT "+tt.privilege+" ON "+tt.object+" TO "+role)
	}
}
