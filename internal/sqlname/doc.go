// Package sqlname derives the quoted SQL names of one outbox's objects from
// its validated [outbox.Table]. Every package that builds SQL takes its
// names from here, so that quoting happens in one place and with
// pgx.Identifier.
package sqlname
