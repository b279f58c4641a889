// Package tmplmigrate applies and renders embedded tern migration templates
// for one table. The outbox (package migrations) and the inbox (package
// inbox) each ship a set of NNN_name.sql templates whose identifiers are
// filled in per table; this package holds the steps they share: the
// advisory lock, the schema, tern's version table, and rendering to plain
// SQL for other migration tools.
package tmplmigrate
