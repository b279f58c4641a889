package sqlname

import (
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/ident"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Names holds the unquoted and quoted names of one outbox's objects.
type Names struct {
	// Table is the validated table this set was derived from.
	Table outbox.Table
	// Schema is the quoted schema name.
	Schema string
	// Qualified is the quoted schema.table of the outbox table.
	Qualified string
	// VersionTable is the quoted schema.table of tern's version table.
	VersionTable string
}

// Suffixes of the objects that belong to an outbox table. The longest must
// fit in ident.SuffixRoom.
const (
	SuffixPkey          = "_pkey"
	SuffixDueIndex      = "_due_idx"
	SuffixLeaseIndex    = "_lease_idx"
	SuffixFinishedIndex = "_finished_idx"
	SuffixSeqIndex      = "_seq_idx"
	SuffixTypeIndex     = "_type_idx"
	SuffixAggIndex      = "_aggregate_idx"
	SuffixCodeIndex     = "_code_idx"
	SuffixFailedIndex   = "_failed_idx"
	SuffixTypeDueIndex  = "_type_due_idx"
	SuffixOrderIndex    = "_order_idx"
	// The list suffixes name migration 008's new operator indexes while it
	// builds them (or an operator builds them CONCURRENTLY beforehand);
	// it then renames them to the seq, type, aggregate and code names.
	SuffixSeqListIndex  = "_seq_list_idx"
	SuffixTypeListIndex = "_type_list_idx"
	SuffixAggListIndex  = "_agg_list_idx"
	SuffixCodeListIndex = "_code_list_idx"
	SuffixStatusCheck   = "_status_check"
	SuffixLeaseCheck    = "_lease_check"
	SuffixAttemptsCheck = "_attempts_check"
	SuffixLogCheck      = "_log_check"
	SuffixErrorCheck    = "_error_check"
	SuffixVersion       = "_schema_version"
)

// For validates t (after applying defaults) and returns its names.
func For(t outbox.Table) (Names, error) {
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return Names{}, err
	}
	return Names{
		Table:        t,
		Schema:       pgx.Identifier{t.Schema}.Sanitize(),
		Qualified:    pgx.Identifier{t.Schema, t.Name}.Sanitize(),
		VersionTable: pgx.Identifier{t.Schema, t.Name + SuffixVersion}.Sanitize(),
	}, nil
}

// Object returns the unquoted name of the table's object with the suffix.
func (n Names) Object(suffix string) string { return n.Table.Name + suffix }

// Quoted returns the quoted, unqualified name of the object with the suffix.
func (n Names) Quoted(suffix string) string {
	return pgx.Identifier{n.Object(suffix)}.Sanitize()
}

// Channel returns the default LISTEN/NOTIFY channel of the outbox:
// "<schema>.<table>", or "pgoutbox_<table>" when that would pass the
// 63-byte limit on channel names. Compare it with a quoted LISTEN name via
// pgx.Identifier{ch}.Sanitize().
func (n Names) Channel() string {
	if ch := n.Table.String(); len(ch) <= ident.MaxLen {
		return ch
	}
	return "pgoutbox_" + n.Table.Name
}
