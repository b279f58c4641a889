// Package ident holds the allow-list for the schema and table names that
// pgoutbox builds SQL from, and the length limits behind it. It is a
// migration detail, not vocabulary: callers meet it only through
// [outbox.Table.Validate] and the [outbox.ErrInvalidIdentifier] it returns.
//
// It imports only the standard library, so that package outbox can use it.
package ident
