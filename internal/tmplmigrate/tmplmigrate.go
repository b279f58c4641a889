package tmplmigrate

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Set is one table's migrations: the templates and what fills them in.
type Set struct {
	// FS holds the NNN_name.sql templates.
	FS fs.FS
	// Names are the table's validated names; the version is kept in
	// Names.VersionTable.
	Names sqlname.Names
	// Data is what the templates see: quoted identifiers.
	Data map[string]any
	// LockWait bounds how long Migrate waits for its advisory locks;
	// zero means DefaultLockWait.
	LockWait time.Duration
}

// Conn is what the public migration functions take from a caller: a
// direct connection, or a pool to acquire one from.
type Conn interface{ *pgx.Conn | *pgxpool.Pool }

// WithConn runs f on one direct connection of conn: conn itself, or one
// acquired from the pool for the call and released after it. A nil conn
// gives an *outbox.InputError naming "conn", as dispatcher.New names a nil
// pool, and f does not run.
func WithConn[C Conn](ctx context.Context, conn C, f func(*pgx.Conn) error) error {
	switch c := any(conn).(type) {
	case *pgx.Conn:
		if c != nil {
			return f(c)
		}
	case *pgxpool.Pool:
		if c != nil {
			pc, err := c.Acquire(ctx)
			if err != nil {
				return errtext.Wrap(err, "acquire a connection")
			}
			defer pc.Release()
			return f(pc.Conn())
		}
	}
	return &outbox.InputError{Field: "conn", Reason: "must not be nil"}
}

// Migrate applies what is missing of s on conn. It holds two session
// advisory locks while it runs, one keyed by the table's qualified name and
// tern's own, so that concurrent callers migrate one at a time and the
// later ones find nothing to do; it waits at most s.LockWait for them and
// then returns a *LockError naming the backend that holds
// the lock. It creates the schema when it is missing, before tern creates
// its version table in it. tern runs each migration in a transaction of
// its own; one that gives up waiting for a lock (SQLSTATE 55P03, after the
// lock_timeout the migration sets) is tried again, 5 attempts in all,
// pausing 0.5s doubling, unless ctx ends first.
func Migrate(ctx context.Context, conn *pgx.Conn, s Set) (err error) {
	table := s.Names.Table
	ls, err := locks(ctx, conn, table)
	if err != nil {
		return err
	}
	release, err := lockAll(ctx, conn, table, ls, cmp.Or(s.LockWait, DefaultLockWait))
	defer func() {
		if uerr := release(); err == nil && uerr != nil {
			err = errtext.Wrap(uerr, "migrate %s: advisory unlock", table)
		}
	}()
	if err != nil {
		return err
	}
	if err := createSchema(ctx, conn, s.Names.Schema); err != nil {
		return errtext.Wrap(err, "migrate %s: create schema", table)
	}
	m, err := migrate.NewMigrator(ctx, conn, s.Names.VersionTable)
	if err != nil {
		return errtext.Wrap(err, "migrate %s: version table", table)
	}
	if err := load(m, s); err != nil {
		return err
	}
	return migrateRetrying(ctx, m, table)
}

// createSchema creates the schema (quoted) when it does not exist yet.
// CREATE SCHEMA IF NOT EXISTS alone would not do: PostgreSQL checks the
// CREATE privilege on the database before it looks whether the schema
// exists, and a migrator that owns its schema needs no database-wide
// privilege.
func createSchema(ctx context.Context, conn *pgx.Conn, schema string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL", schema).Scan(&exists); err != nil || exists {
		return err
	}
	_, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema)
	return err
}

// lockRetries is how many times Migrate tries a migration that could not
// take its lock within the migration's lock_timeout, and lockBackoff the
// pause before the first retry, doubling after each.
const (
	lockRetries = 5
	lockBackoff = 500 * time.Millisecond
)

// migrateRetrying runs m's pending migrations, each in a transaction of
// its own, and starts again from the first one not applied when one gave
// up waiting for a lock (SQLSTATE 55P03, lock_not_available): another
// transaction held the table, and waiting longer would have queued every
// writer of the table behind the migration.
func migrateRetrying(ctx context.Context, m *migrate.Migrator, table outbox.Table) error {
	pause := lockBackoff
	for attempt := 1; ; attempt++ {
		err := m.Migrate(ctx)
		if err == nil {
			return nil
		}
		if pgerr.Code(err) != pgerr.LockNotAvailable {
			return errtext.Wrap(err, "migrate %s", table)
		}
		if attempt == lockRetries {
			return fmt.Errorf("pgoutbox: migrate %s: another transaction holds a lock on %s "+
				"(gave up after %d attempts; retry when its long transactions have ended): %w",
				table, table, attempt, err)
		}
		if err := Sleep(ctx, pause); err != nil {
			return errtext.Wrap(err, "migrate %s: waiting to retry a migration that found the table locked", table)
		}
		pause *= 2
	}
}

// Sleep waits for d, or returns ctx's cause if it ends first: the
// context-bounded pause of the migrations and of the dispatcher's build
// of the order index, on the wall clock (see clock.Clock.Sleep).
func Sleep(ctx context.Context, d time.Duration) error { return clock.Real().Sleep(ctx, d) }

// load renders the templates of s into m. Migrate and Render both go
// through it, so they produce the same SQL.
func load(m *migrate.Migrator, s Set) error {
	// tern renders the templates while loading them, so Data comes first.
	m.Data = s.Data
	if err := m.LoadMigrations(s.FS); err != nil {
		return errtext.Wrap(err, "migrate %s: load", s.Names.Table)
	}
	return nil
}

// Version returns the version recorded in versionTable (quoted, qualified),
// or 0 when the table does not exist.
func Version(ctx context.Context, conn *pgx.Conn, versionTable string) (int32, error) {
	var exists bool
	err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", versionTable).Scan(&exists)
	if err != nil || !exists {
		return 0, err
	}
	var v int32
	err = conn.QueryRow(ctx, "SELECT version FROM "+versionTable).Scan(&v)
	return v, err
}

// Latest returns the number of migrations in fsys, the newest version.
func Latest(fsys fs.FS) int32 {
	paths, err := migrate.FindMigrations(fsys)
	if err != nil {
		panic(err) // the embedded files are fixed at build time
	}
	return int32(len(paths))
}

// Render returns, for every NNN_name.sql of s, NNN_name.up.sql and
// NNN_name.down.sql (golang-migrate's naming) rendered with s.Data. Each up
// file ends by recording its version in the version table Migrate keeps,
// and each down file the version before it, so whichever tool applied them,
// Version reads the same. by names the caller for the files' header.
func Render(s Set, by string) (fs.FS, error) {
	// Without a connection a tern Migrator only loads and renders.
	m, err := migrate.NewMigrator(context.Background(), nil, s.Names.VersionTable)
	if err != nil {
		return nil, errtext.Wrap(err, "render")
	}
	if err := load(m, s); err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	for _, mig := range m.Migrations {
		base := strings.TrimSuffix(mig.Name, ".sql")
		out[base+".up.sql"] = renderedFile(s.Names, by, mig.Name, "up", mig.UpSQL, mig.Sequence)
		out[base+".down.sql"] = renderedFile(s.Names, by, mig.Name, "down", mig.DownSQL, mig.Sequence-1)
	}
	return out, nil
}

// renderedFile is one direction of one migration, followed by the
// statements that record version in the version table.
func renderedFile(names sqlname.Names, by, source, direction, sql string, version int32) *fstest.MapFile {
	vt := names.VersionTable
	text := fmt.Sprintf(`-- pgoutbox %s (%s) for %s, rendered by %s.

%s

-- Record the schema version where Migrate and Verify read it.
CREATE TABLE IF NOT EXISTS %s (version int4 NOT NULL);
INSERT INTO %s (version) SELECT 0 WHERE NOT EXISTS (SELECT FROM %s);
UPDATE %s SET version = %d;
`, source, direction, names.Table, by, strings.TrimSpace(sql), vt, vt, vt, vt, version)
	return &fstest.MapFile{Data: []byte(text), Mode: 0o444}
}
