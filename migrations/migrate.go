package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

//go:embed *.sql
var files embed.FS

// FS is the migration templates as tern reads them: NNN_name.sql files whose
// names in double braces are filled in by [Migrate] or [Render].
var FS fs.FS = files

// Config says which outbox to migrate or verify.
type Config struct {
	// Table is the outbox's schema and table name. Defaults to
	// public.outbox_events.
	Table outbox.Table
}

// Migrate creates or upgrades the outbox schema on conn to the latest
// version. It is idempotent, and safe when several processes call it at
// once (see the package documentation). It needs a direct connection, not
// one behind a transaction-mode pooler.
func Migrate(ctx context.Context, conn *pgx.Conn, cfg Config) (err error) {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return err
	}
	unlock, err := lockTable(ctx, conn, names)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := unlock(); err == nil {
			err = uerr
		}
	}()
	// The schema must exist before tern creates its version table in it.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+names.Schema); err != nil {
		return fmt.Errorf("pgoutbox: migrate: create schema: %w", err)
	}
	m, err := newMigrator(ctx, conn, names)
	if err != nil {
		return err
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("pgoutbox: migrate %s: %w", names.Table, err)
	}
	return nil
}

// Version returns the schema version applied to the outbox on conn, or 0
// when it has never been migrated.
func Version(ctx context.Context, conn *pgx.Conn, cfg Config) (int32, error) {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return 0, err
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", names.VersionTable).Scan(&exists)
	if err != nil || !exists {
		return 0, err
	}
	var v int32
	err = conn.QueryRow(ctx, "SELECT version FROM "+names.VersionTable).Scan(&v)
	return v, err
}

// Latest returns the newest schema version this library ships.
func Latest() int32 {
	paths, err := migrate.FindMigrations(files)
	if err != nil {
		panic(err) // the embedded files are fixed at build time
	}
	return int32(len(paths))
}

func newMigrator(ctx context.Context, conn *pgx.Conn, names sqlname.Names) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, names.VersionTable)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: migrate: version table: %w", err)
	}
	if err := loadMigrations(m, names); err != nil {
		return nil, err
	}
	return m, nil
}

// loadMigrations renders the embedded templates for names into m. Migrate
// and Render both go through it, so they produce the same SQL.
func loadMigrations(m *migrate.Migrator, names sqlname.Names) error {
	// tern renders the templates while loading them, so Data comes first.
	m.Data = templateData(names)
	if err := m.LoadMigrations(files); err != nil {
		return fmt.Errorf("pgoutbox: migrate: load: %w", err)
	}
	return nil
}

// lockTable takes a session advisory lock keyed by the outbox's qualified
// name and returns the function that releases it.
func lockTable(ctx context.Context, conn *pgx.Conn, names sqlname.Names) (func() error, error) {
	key := "pgoutbox.migrate:" + names.Table.String()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", key); err != nil {
		return nil, fmt.Errorf("pgoutbox: migrate: advisory lock: %w", err)
	}
	return func() error {
		_, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
		return err
	}, nil
}

// templateData is what the migration templates see: every name quoted.
func templateData(n sqlname.Names) map[string]any {
	return map[string]any{
		"schema":         n.Schema,
		"table":          n.Qualified,
		"pkey":           n.Quoted(sqlname.SuffixPkey),
		"status_check":   n.Quoted(sqlname.SuffixStatusCheck),
		"lease_check":    n.Quoted(sqlname.SuffixLeaseCheck),
		"attempts_check": n.Quoted(sqlname.SuffixAttemptsCheck),
		"log_check":      n.Quoted(sqlname.SuffixLogCheck),
		"error_check":    n.Quoted(sqlname.SuffixErrorCheck),
		"due_idx":        n.Quoted(sqlname.SuffixDueIndex),
		"lease_idx":      n.Quoted(sqlname.SuffixLeaseIndex),
	}
}
