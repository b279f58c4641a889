package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

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

// payloadShown is how many payload bytes inspect prints without -full.
const payloadShown = 4096

// plural returns "1 event" or "n events": n with the noun's form for it.
func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprint(n) + " " + many
}

// shownPayload returns the part of payload that inspect prints: all of it
// with full or when it is at most payloadShown bytes long, else its first
// payloadShown bytes, less a UTF-8 sequence cut at the end.
func shownPayload(payload []byte, full bool) []byte {
	if full || len(payload) <= payloadShown {
		return payload
	}
	end := payloadShown
	for i := end - 1; i >= end-utf8.UTFMax; i-- {
		if utf8.RuneStart(payload[i]) { // the last sequence starts at i
			if !utf8.FullRune(payload[i:end]) {
				end = i
			}
			break
		}
	}
	return payload[:end]
}

// printDetail writes one event as "field: value" lines, its headers, its
// attempt log and shown, the part of its payload to print.
func (e *env) printDetail(d admin.Detail, shown []byte) error {
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
	fmt.Fprintf(&b, "\nattempt log (%s, oldest first):\n", plural(len(d.AttemptLog), "entry", "entries"))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ATTEMPT\tOUTCOME\tCODE\tOWNER\tSTARTED\tENDED\tMESSAGE")
	for _, l := range d.AttemptLog {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Attempt, l.Outcome, l.Code, l.Owner,
			l.Started.Format(time.RFC3339), l.Ended.Format(time.RFC3339), l.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	size := plural(len(d.Payload), "byte", "bytes")
	if len(shown) < len(d.Payload) {
		size += fmt.Sprintf(", the first %d shown; -full shows all", len(shown))
	}
	if printable(d.Payload) {
		fmt.Fprintf(&b, "\npayload (%s):\n%s\n", size, shown)
	} else {
		fmt.Fprintf(&b, "\npayload (%s, base64):\n%s\n", size, base64.StdEncoding.EncodeToString(shown))
	}
	_, err := fmt.Fprint(e.out, b.String())
	return err
}
