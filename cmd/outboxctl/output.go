package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgoutbox/pgoutbox/admin"
)

// printf writes to the command's output; write errors surface when the
// program exits (stdout is a terminal or a pipe).
func (e *env) printf(format string, args ...any) { fmt.Fprintf(e.out, format, args...) }

// printJSON writes v as indented JSON.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTable writes an aligned table with a header, then footer if any.
func (e *env) printTable(header []string, rows [][]string, footer string) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if footer != "" {
		b.WriteString(footer + "\n")
	}
	_, err := fmt.Fprint(e.out, b.String())
	return err
}

// printDetail writes one event as "field: value" lines, its headers, its
// attempt log and its payload.
func (e *env) printDetail(d admin.Detail) error {
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339Nano)
	}
	fields := [][]string{
		{"id:", d.ID.String()}, {"seq:", fmt.Sprint(d.Seq)}, {"type:", d.Type}, {"status:", string(d.Status)},
		{"attempts:", fmt.Sprint(d.Attempts)}, {"recoveries:", fmt.Sprint(d.Recoveries)}, {"snoozes:", fmt.Sprint(d.Snoozes)},
		{"aggregate:", strings.Trim(d.AggregateType+" "+d.AggregateID, " ")}, {"partition_key:", d.PartitionKey},
		{"idempotency_key:", d.IdempotencyKey}, {"content_type:", d.ContentType},
		{"created_at:", ts(&d.CreatedAt)}, {"next_attempt_at:", ts(&d.NextAttemptAt)},
		{"lock_owner:", d.LockOwner}, {"locked_at:", ts(d.LockedAt)}, {"lease_until:", ts(d.LeaseUntil)},
		{"sent_at:", ts(d.SentAt)}, {"failed_at:", ts(d.FailedAt)},
		{"last_error_code:", string(d.LastErrorCode)}, {"last_error:", d.LastError},
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s\t%s\n", f[0], f[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\nheaders:\n")
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, d.Headers[k])
	}
	fmt.Fprintf(&b, "\nattempt log (%d entries, oldest first):\n", len(d.AttemptLog))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ATTEMPT\tOUTCOME\tCODE\tOWNER\tSTARTED\tENDED\tMESSAGE")
	for _, l := range d.AttemptLog {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Attempt, l.Outcome, l.Code, l.Owner,
			l.Started.Format(time.RFC3339), l.Ended.Format(time.RFC3339), l.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if text, ok := printable(d.Payload); ok {
		fmt.Fprintf(&b, "\npayload (%d bytes):\n%s\n", len(d.Payload), text)
	} else {
		fmt.Fprintf(&b, "\npayload (%d bytes, base64):\n%s\n", len(d.Payload), base64.StdEncoding.EncodeToString(d.Payload))
	}
	_, err := fmt.Fprint(e.out, b.String())
	return err
}
