package migrations

import (
	"io/fs"

	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
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
// Migration 12 is rendered for cfg.KeyOrder: its up file drops the
// order index without it and leaves it with it; the build of a missing
// index that Migrate runs after the migrations with KeyOrder has no file
// (its statement is in 012's header).
// For a log (cfg.Kind outbox.KindLog) it renders the log's templates
// ([LogFS]) the same way, recording their versions in the log's own
// <table>_schema_version.
// Render touches no database. It returns an error wrapping
// [outbox.ErrInvalidIdentifier] for an invalid cfg.
func Render(cfg Config) (fs.FS, error) {
	set, err := migrationSet(cfg)
	if err != nil {
		return nil, err
	}
	return tmplmigrate.Render(set, "migrations.Render")
}
