package outbox

import (
	"fmt"
	"strings"
)

// MaxIdentifierLen is PostgreSQL's limit on identifiers (NAMEDATALEN - 1).
const MaxIdentifierLen = 63

// Default names of the outbox table and its schema.
const (
	DefaultSchema = "public"
	DefaultTable  = "outbox_events"
)

// ValidateIdentifier checks a schema or table name against the allow-list:
// 1 to 63 bytes of lowercase ASCII letters, digits and underscores, not
// starting with a digit, and not starting with "pg_" (reserved by
// PostgreSQL). Names are still quoted wherever SQL is built; the allow-list
// keeps them readable in psql and free of case surprises.
func ValidateIdentifier(name string) error {
	reason := identifierProblem(name)
	if reason == "" {
		return nil
	}
	return fmt.Errorf("%w: %q %s", ErrInvalidIdentifier, name, reason)
}

func identifierProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxIdentifierLen:
		return fmt.Sprintf("is longer than %d bytes", MaxIdentifierLen)
	case strings.HasPrefix(name, "pg_"):
		return "starts with the reserved prefix pg_"
	case name[0] >= '0' && name[0] <= '9':
		return "starts with a digit"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "may hold only a-z, 0-9 and _"
		}
	}
	return ""
}

// Table names one outbox: a schema and a table in it. Several outboxes may
// live in one database, each with its own Table. The zero value means
// [DefaultSchema].[DefaultTable].
type Table struct {
	// Schema holding the outbox table. Defaults to "public".
	Schema string
	// Name of the outbox table. Defaults to "outbox_events". The library
	// derives index, constraint and version-table names from it by adding
	// a suffix of up to [MaxTableSuffixLen] bytes, so it may be at most
	// 63 - MaxTableSuffixLen bytes long.
	Name string
}

// MaxTableSuffixLen is the length of the longest suffix the library adds to a
// table name to name the objects that belong to it ("_schema_version").
const MaxTableSuffixLen = len("_schema_version")

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

// Validate checks both names with [ValidateIdentifier] and that the table
// name leaves room for the suffixes of its derived objects. Call it on the
// result of WithDefaults.
func (t Table) Validate() error {
	if err := ValidateIdentifier(t.Schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := ValidateIdentifier(t.Name); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if max := MaxIdentifierLen - MaxTableSuffixLen; len(t.Name) > max {
		return fmt.Errorf("table: %w: %q is longer than %d bytes (derived object names need room)", ErrInvalidIdentifier, t.Name, max)
	}
	return nil
}

// String returns schema.table, unquoted, for messages.
func (t Table) String() string { return t.Schema + "." + t.Name }
