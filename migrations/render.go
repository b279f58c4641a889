package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"

	"github.com/jackc/tern/v2/migrate"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Render returns the migrations as plain SQL for the outbox cfg names, for
// teams that run goose, golang-migrate or atlas instead of [Migrate]. For
// every NNN_name.sql in [FS] the result holds NNN_name.up.sql and
// NNN_name.down.sql (golang-migrate's naming), rendered with the same
// template data Migrate uses, every identifier quoted.
//
// Each up file ends by recording its version, and each down file the
// version before it, in the table <table>_schema_version that Migrate
// keeps, so [Verify] and [Version] see the same version whichever tool
// applied the files, and a later switch to Migrate finds nothing to redo.
// Render touches no database. It returns an error wrapping
// [outbox.ErrInvalidIdentifier] for an invalid cfg.
func Render(cfg Config) (fs.FS, error) {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return nil, err
	}
	// Without a connection a tern Migrator only loads and renders.
	m, err := migrate.NewMigrator(context.Background(), nil, names.VersionTable)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: render: %w", err)
	}
	if err := loadMigrations(m, names); err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	for _, mig := range m.Migrations {
		base := strings.TrimSuffix(mig.Name, ".sql")
		out[base+".up.sql"] = renderedFile(names, mig.Name, "up", mig.UpSQL, mig.Sequence)
		out[base+".down.sql"] = renderedFile(names, mig.Name, "down", mig.DownSQL, mig.Sequence-1)
	}
	return out, nil
}

// renderedFile is one direction of one migration, followed by the
// statements that record version in the version table.
func renderedFile(names sqlname.Names, source, direction, sql string, version int32) *fstest.MapFile {
	vt := names.VersionTable
	text := fmt.Sprintf(`-- pgoutbox %s (%s) for %s, rendered by migrations.Render.

%s

-- Record the schema version where migrations.Migrate and migrations.Verify
-- read it.
CREATE TABLE IF NOT EXISTS %s (version int4 NOT NULL);
INSERT INTO %s (version) SELECT 0 WHERE NOT EXISTS (SELECT FROM %s);
UPDATE %s SET version = %d;
`, source, direction, names.Table, strings.TrimSpace(sql), vt, vt, vt, vt, version)
	return &fstest.MapFile{Data: []byte(text), Mode: 0o444}
}
