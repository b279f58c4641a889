package sqlname

import (
	"fmt"
	"strings"
	"time"

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
	// Dead is the quoted schema.table of the dead letters (FAILED rows).
	Dead string
	// Sent is the quoted schema.table of the SENT history (partitioned).
	Sent string
	// Audit is the quoted schema.table of the operators' audit log
	// (schema version 13).
	Audit string
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

	// Schema version 10 and 11 (issue 25): the outbox table keeps only
	// PENDING and PROCESSING rows, with the held and stray indexes; dead
	// letters and SENT history have tables of their own.
	SuffixHeldIndex      = "_held_idx"
	SuffixStrayIndex     = "_stray_idx"
	SuffixDead           = "_dead"
	SuffixDeadPkey       = "_dead_pkey"
	SuffixDeadCheck      = "_dead_check"
	SuffixDeadSeqIndex   = "_dead_seq_idx"
	SuffixDeadTypeIndex  = "_dead_type_idx"
	SuffixDeadAggIndex   = "_dead_agg_idx"
	SuffixDeadCodeIndex  = "_dead_code_idx"
	SuffixDeadTimeIndex  = "_dead_time_idx"
	SuffixDeadOrderIndex = "_dead_order_idx"
	SuffixSent           = "_sent"
	SuffixSentCheck      = "_sent_check"
	SuffixSentDefault    = "_sent_default"
	SuffixSentIDIndex    = "_sent_id_idx"
	SuffixSentSeqIndex   = "_sent_seq_idx"
	SuffixSentTypeIndex  = "_sent_type_idx"
	SuffixSentAggIndex   = "_sent_agg_idx"
	// SuffixSentDefaultIndex is the default partition's own index on
	// sent_at, which serves retention's batched deletes there.
	SuffixSentDefaultIndex = "_sent_def_idx"
	// SuffixSentAdd and SuffixSentDrop name the SECURITY DEFINER
	// functions that create and drop the history's time partitions
	// (migration 010), so that no role but the migrator needs to own the
	// history.
	SuffixSentAdd  = "_sent_add"
	SuffixSentDrop = "_sent_drop"
	// SuffixPartition starts the name of a time partition of the SENT
	// history, followed by its start as YYYYMMDDHHMM in UTC (see
	// Names.Partition).
	SuffixPartition = "_s"

	// Schema version 13 (issue 28): the operators' audit table, its
	// primary key, time index and request index (unique: an action's
	// request id, single use), and the SENT history's BRIN index on
	// sent_at.
	SuffixAuditPkey         = "_audit_pkey"
	SuffixAudit             = "_audit"
	SuffixAuditTimeIndex    = "_audit_at_idx"
	SuffixAuditRequestIndex = "_audit_request_idx"
	SuffixSentTimeIndex     = "_sent_time_idx"
	// SuffixSentSummarize names the SECURITY DEFINER function that
	// summarizes the full block ranges of the history's BRIN index not
	// summarized yet (the retention pass calls it).
	SuffixSentSummarize = "_sent_summarize"
)

// Suffixes of a log table's objects (outbox.KindLog, issue 27): its one
// index, the ticks and the ticker's lease row, the consumer groups'
// cursors, the parked keys and events, and the SECURITY DEFINER functions
// that tick, add and truncate parts and trim ticks. A part is named SuffixLogPart and
// its number (lower bound / LogPartXids) as 10 hex digits (Names.LogPart).
const (
	SuffixLogXidIndex  = "_xid_idx"
	SuffixTicks        = "_ticks"
	SuffixTicker       = "_ticker"
	SuffixCursors      = "_cursors"
	SuffixParked       = "_parked"
	SuffixParkedKeys   = "_parked_keys"
	SuffixParkedKeyIdx = "_parked_key_idx"
	SuffixTick         = "_tick"
	SuffixPartAdd      = "_part_add"
	SuffixPartTruncate = "_part_truncate"
	SuffixTickTrim     = "_tick_trim"
	SuffixLogPart      = "_x"
)

// LogPartXids is the width of one part of a log table: the range of
// transaction ids (xid8) whose events it holds. Parts start at multiples
// of it.
const LogPartXids = 1 << 22

// LogPart returns the unquoted name of the log part that holds the
// transaction ids [lo, lo+LogPartXids), lo a multiple of LogPartXids.
func (n Names) LogPart(lo uint64) string {
	return fmt.Sprintf("%s%s%010x", n.Table.Name, SuffixLogPart, lo/LogPartXids)
}

// Log returns the quoted schema.table of the log's companion table with
// the suffix (SuffixTicks, SuffixCursors, ...).
func (n Names) Log(suffix string) string {
	return pgx.Identifier{n.Table.Schema, n.Object(suffix)}.Sanitize()
}

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
		Dead:         pgx.Identifier{t.Schema, t.Name + SuffixDead}.Sanitize(),
		Sent:         pgx.Identifier{t.Schema, t.Name + SuffixSent}.Sanitize(),
		Audit:        pgx.Identifier{t.Schema, t.Name + SuffixAudit}.Sanitize(),
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

// PartitionLayout is the time layout of a history partition's name after
// SuffixPartition: its start, to the minute, in UTC.
const PartitionLayout = "200601021504"

// Partition returns the unquoted name of the SENT history's time
// partition that starts at start (truncated to the minute, in UTC).
func (n Names) Partition(start time.Time) string {
	return n.Table.Name + SuffixPartition + start.UTC().Format(PartitionLayout)
}

// Function returns the quoted schema.name of the table's function with
// the suffix (SuffixSentAdd, SuffixSentDrop).
func (n Names) Function(suffix string) string {
	return pgx.Identifier{n.Table.Schema, n.Object(suffix)}.Sanitize()
}

// SentAddSignature returns the history's partition-creating function
// (SuffixSentAdd), quoted and qualified, with its argument types, as
// GRANT and has_function_privilege take it.
func (n Names) SentAddSignature() string {
	return n.Function(SuffixSentAdd) + "(timestamptz, timestamptz)"
}

// SentDropSignature is SentAddSignature for the partition-dropping
// function (SuffixSentDrop).
func (n Names) SentDropSignature() string { return n.Function(SuffixSentDrop) + "(timestamptz)" }

// SentSummarizeSignature is SentAddSignature for the BRIN summarizing
// function (SuffixSentSummarize, schema version 13).
func (n Names) SentSummarizeSignature() string { return n.Function(SuffixSentSummarize) + "()" }

// QualifiedPartition returns the quoted schema.table of that partition.
func (n Names) QualifiedPartition(start time.Time) string {
	return pgx.Identifier{n.Table.Schema, n.Partition(start)}.Sanitize()
}

// Columns are the outbox table's columns in table order, which its dead
// letters and its SENT history share (CREATE TABLE … (LIKE …), schema
// version 10): a statement that moves a row between them names every
// one, never "*".
var Columns = []string{
	"id", "seq", "event_type", "aggregate_type", "aggregate_id", "partition_key", "idempotency_key",
	"content_type", "payload", "headers", "status", "attempts", "recoveries", "next_attempt_at",
	"lock_token", "lock_owner", "locked_at", "lease_until", "heartbeat_at", "last_error_code",
	"last_error", "attempt_log", "created_at", "sent_at", "failed_at", "started_at", "snoozes",
	"skipped_at", "outcome_token",
}

// ReplaceDead is the ON CONFLICT clause of an insert into the dead
// letters: an id that is a dead letter already (an event emitted again
// with the id of one) has its dead letter replaced by the newer row,
// rather than failing the statement and every batch that holds the row.
var ReplaceDead = func() string {
	excluded := make([]string, len(Columns))
	for i, c := range Columns {
		excluded[i] = "EXCLUDED." + c
	}
	return "ON CONFLICT (id) DO UPDATE SET (" + strings.Join(Columns, ", ") + ") = ROW(" + strings.Join(excluded, ", ") + ")"
}()
