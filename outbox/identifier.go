package outbox

import (
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/ident"
)

// Default names of the outbox table and its schema.
const (
	DefaultSchema = "public"
	DefaultTable  = "outbox_events"
)

// Table names one outbox: a schema and a table in it. Several outboxes may
// live in one database, each with its own Table. The zero value, and an
// empty field, mean the default ([DefaultSchema].[DefaultTable]) in every
// package that takes a Table.
//
// Both names must be plain identifiers: 1 to 63 bytes of lowercase ASCII
// letters, digits and underscores, not starting with a digit or with
// "pg_". The library derives index, constraint and version-table names
// from the table name by adding a suffix of up to 15 bytes, so the table
// name may be at most 48 bytes long. Names are still quoted wherever SQL
// is built; the allow-list keeps them readable in psql and free of case
// surprises.
type Table struct {
	// Schema holding the outbox table. Defaults to "public".
	Schema string
	// Name of the outbox table. Defaults to "outbox_events"; at most 48
	// bytes.
	Name string
}

// WithDefaults returns t with empty names replaced by the defaults.
func (t Table) WithDefaults() Table {
	if t.Schema == "" {
		t.Schema = DefaultSchema
	}
	if t.Name == "" {
		t.Name = DefaultTable
	}
	return t
}

// Validate checks the names t stands for (empty ones meaning the
// defaults) against the rules in [Table]. Its error wraps
// [ErrInvalidIdentifier].
func (t Table) Validate() error {
	t = t.WithDefaults()
	if reason := ident.Problem(t.Schema); reason != "" {
		return fmt.Errorf("%w: schema %q %s", ErrInvalidIdentifier, t.Schema, reason)
	}
	if reason := ident.Problem(t.Name); reason != "" {
		return fmt.Errorf("%w: table %q %s", ErrInvalidIdentifier, t.Name, reason)
	}
	if len(t.Name) > ident.MaxTableLen {
		return fmt.Errorf("%w: table %q is longer than %d bytes (derived object names need room)", ErrInvalidIdentifier, t.Name, ident.MaxTableLen)
	}
	return nil
}

// String returns schema.table, unquoted, for messages; empty names read as
// the defaults.
func (t Table) String() string {
	t = t.WithDefaults()
	return t.Schema + "." + t.Name
}
