package inbox

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// This file is a generic "migrate these embedded tern templates for this
// table" helper. It belongs with package migrations, which has the same
// steps unexported; it lives here until migrations exports one that both
// can call.

// migrateFS applies the templates in fsys, rendered with data, to conn. It
// keeps the version in names.VersionTable and holds a session advisory lock
// keyed by names.Table while it runs. The key space is the one
// migrations.Migrate uses: two tables with one qualified name cannot both
// exist anyway.
func migrateFS(ctx context.Context, conn *pgx.Conn, fsys fs.FS, names sqlname.Names, data map[string]any) (err error) {
	key := "pgoutbox.migrate:" + names.Table.String()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", key); err != nil {
		return fmt.Errorf("pgoutbox: migrate %s: advisory lock: %w", names.Table, err)
	}
	defer func() {
		_, uerr := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
		if err == nil && uerr != nil {
			err = fmt.Errorf("pgoutbox: migrate %s: advisory unlock: %w", names.Table, uerr)
		}
	}()
	// The schema must exist before tern creates its version table in it.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+names.Schema); err != nil {
		return fmt.Errorf("pgoutbox: migrate %s: create schema: %w", names.Table, err)
	}
	m, err := migrate.NewMigrator(ctx, conn, names.VersionTable)
	if err != nil {
		return fmt.Errorf("pgoutbox: migrate %s: version table: %w", names.Table, err)
	}
	// tern renders the templates while loading them, so Data comes first.
	m.Data = data
	if err := m.LoadMigrations(fsys); err != nil {
		return fmt.Errorf("pgoutbox: migrate %s: load: %w", names.Table, err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("pgoutbox: migrate %s: %w", names.Table, err)
	}
	return nil
}
