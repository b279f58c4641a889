package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// newAdmin returns an Admin on the command's connection and table.
func (e *env) newAdmin() (*admin.Admin, error) {
	conn, err := e.connect()
	if err != nil {
		return nil, err
	}
	return admin.New(conn, admin.Config{Table: e.table})
}

func countsFlags(*flag.FlagSet) func(*env) error {
	return func(e *env) error {
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		c, err := a.Counts(e.ctx)
		if err != nil {
			return err
		}
		byType, err := a.PendingByType(e.ctx)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(countsJSON{Counts: c, PendingByType: byType})
		}
		t := e.table.WithDefaults()
		err = e.printTable([]string{"STATUS", "COUNT"}, countRows(c), fmt.Sprintf("oldest due event waiting: %s (%s, database time %s)%s",
			c.OldestDueAge.Round(time.Millisecond), t, c.At.Format(time.RFC3339), sentNote(c)+blockedNote(c)+unmovedNote(c)))
		if err != nil {
			return err
		}
		e.printf("\n")
		return printList(e, byType, "no PENDING events", []string{"PENDING BY TYPE", "PENDING", "DUE", "OLDEST DUE WAITING", "OLDEST PENDING AGE"},
			func(p admin.TypePending) []string {
				return []string{p.Type, fmt.Sprint(p.Pending), fmt.Sprint(p.Due), p.OldestDueAge.Round(time.Millisecond).String(),
					p.OldestAge.Round(time.Millisecond).String()}
			})
	}
}

// countsJSON is what counts -json prints: the counts by status (at the
// top level, as before) and the PENDING rows by type.
type countsJSON struct {
	admin.Counts
	PendingByType []admin.TypePending `json:"pending_by_type"`
}

// countRows are the rows of the STATUS/COUNT table of counts and status.
// An estimated SENT count, and so the total, starts with "~".
func countRows(c admin.Counts) [][]string {
	approx := ""
	if c.SentEstimated {
		approx = "~"
	}
	// A limited DueBlocked is a lower bound: due now is then at most.
	atMost, atLeast := "", ""
	if c.DueBlockedLimited {
		atMost, atLeast = "≤", "≥"
	}
	rows := [][]string{
		{"PENDING", fmt.Sprint(c.Pending)},
		{"  due now", atMost + fmt.Sprint(c.Due-c.DueBlocked)},
	}
	if c.DueBlocked > 0 {
		rows = append(rows, []string{"  blocked", atLeast + fmt.Sprint(c.DueBlocked)})
	}
	rows = append(rows, [][]string{
		{"PROCESSING", fmt.Sprint(c.Processing)},
		{"SENT", approx + fmt.Sprint(c.Sent)},
		{"FAILED", fmt.Sprint(c.Failed)},
	}...)
	if c.Unmoved > 0 {
		rows = append(rows, []string{"unmoved", unmovedCount(c)})
	}
	return append(rows, []string{"total", approx + fmt.Sprint(c.Total())})
}

// unmovedCount prints Counts.Unmoved, "≥" before it past its limit.
func unmovedCount(c admin.Counts) string {
	if c.Unmoved > admin.SentCountLimit {
		return "≥" + fmt.Sprint(c.Unmoved)
	}
	return fmt.Sprint(c.Unmoved)
}

// unmovedNote is the footer line that explains the "unmoved" row of
// countRows, or "" when there is none.
func unmovedNote(c admin.Counts) string {
	if c.Unmoved == 0 {
		return ""
	}
	return "\nunmoved: SENT or FAILED events still in the outbox table (from before schema version 10, or written by an older dispatcher); " +
		"the dispatchers' retention pass moves them to the history and the dead letters"
}

// blockedNote is the footer line that explains the "blocked" row of
// countRows, or "" when there is none.
func blockedNote(c admin.Counts) string {
	if c.DueBlocked == 0 {
		return ""
	}
	note := "\nblocked: due, behind a FAILED event of their order key (outboxctl blocked); " +
		"dispatchers with per-key ordering (BlockKey) hold them until it is replayed or skipped"
	if c.DueBlockedLimited {
		note += fmt.Sprintf("; counted behind %d FAILED events only (≥: at least)", admin.BlockedCountLimit)
	}
	return note
}

// sentNote is the footer line that says the SENT count is an estimate,
// or "" when it is exact.
func sentNote(c admin.Counts) string {
	if !c.SentEstimated {
		return ""
	}
	return fmt.Sprintf("\nSENT is estimated (more than %d rows; planner statistics), the other counts are exact", admin.SentCountLimit)
}

func listFlags(fs *flag.FlagSet) func(*env) error {
	status := fs.String("status", "", "only events in this `status` (pending, processing, sent, failed)")
	typ := fs.String("type", "", "only events of this event `type`")
	aggregate := fs.String("aggregate-id", "", "only events about this aggregate `id` (of any aggregate type)")
	code := fs.String("code", "", "only events whose last error `code` is this (FAILED, or retried after it)")
	key := fs.String("key", "", "only events of this order `key` (partition key, else aggregate id)")
	createdAfter := fs.String("created-after", "", "only events created at or after this `time` (RFC 3339)")
	createdBefore := fs.String("created-before", "", "only events created before this `time` (RFC 3339)")
	after := fs.String("after", "", "continue after this `cursor` (printed at the end of the previous page)")
	limit := intRangeFlag(fs, "limit", admin.DefaultListLimit, 1, admin.MaxListLimit, "page `size`")
	return func(e *env) error {
		cursor, err := admin.ParseCursor(*after)
		if err != nil {
			return usagef("-after %q is not a cursor", *after)
		}
		st, err := parseStatus("-status", *status, true)
		if err != nil {
			return err
		}
		c, err := parseCode(*code)
		if err != nil {
			return err
		}
		from, err := parseTime("-created-after", *createdAfter)
		if err != nil {
			return err
		}
		to, err := parseTime("-created-before", *createdBefore)
		if err != nil {
			return err
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		page, err := a.List(e.ctx, admin.ListParams{Status: st, Type: *typ, AggregateID: *aggregate, Code: c, Key: *key,
			CreatedAfter: from, CreatedBefore: to, After: cursor, Limit: *limit})
		if err != nil {
			return asUsage(err)
		}
		if e.json {
			return e.printJSON(page)
		}
		rows := make([][]string, len(page.Events))
		for i, r := range page.Events {
			rows[i] = []string{fmt.Sprint(r.Seq), r.ID.String(), string(r.Status), r.Type, fmt.Sprint(r.Attempts),
				fmt.Sprint(r.Snoozes), r.NextAttemptAt.Format(time.RFC3339), r.CreatedAt.Format(time.RFC3339), string(r.LastErrorCode)}
		}
		events := plural(len(rows), "event", "events")
		footer := events + "; no more pages"
		if !page.Next.IsZero() {
			footer = events + "; next page: -after " + page.Next.String()
		}
		return e.printTable([]string{"SEQ", "ID", "STATUS", "TYPE", "ATTEMPTS", "SNOOZES", "NEXT_ATTEMPT_AT", "CREATED_AT", "LAST_ERROR_CODE"}, rows, footer)
	}
}

func inspectFlags(fs *flag.FlagSet) func(*env) error {
	idFlag := fs.String("id", "", "event `id` (or give it as the argument)")
	full := fs.Bool("full", false, fmt.Sprintf("print the whole payload (without it, at most %d bytes)", payloadShown))
	return func(e *env) error {
		raw := *idFlag
		switch {
		case len(e.args) > 1, len(e.args) == 1 && raw != "":
			return usagef("give one event id, as the argument or with -id")
		case len(e.args) == 1:
			raw = e.args[0]
		case raw == "":
			return usagef("an event id is required")
		}
		id, err := uuid.Parse(raw)
		if err != nil {
			return usagef("%q is not an event id (a UUID)", raw)
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		d, err := a.Inspect(e.ctx, id)
		if err != nil {
			return err
		}
		shown := shownPayload(d.Payload, *full)
		if e.json {
			truncated := len(shown) < len(d.Payload)
			d.Payload = shown
			return e.printJSON(struct {
				admin.Detail
				Truncated bool `json:"payload_truncated"`
			}{d, truncated})
		}
		return e.printDetail(d, shown)
	}
}

// idsFlag collects event ids from repeated or comma-separated -id flags.
type idsFlag []uuid.UUID

func (f *idsFlag) String() string { return "" }

func (f *idsFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		id, err := uuid.Parse(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not an event id (a UUID)", s)
		}
		*f = append(*f, id)
	}
	return nil
}

func replayFlags(fs *flag.FlagSet) func(*env) error {
	var ids idsFlag
	fs.Var(&ids, "id", "replay this event `id` (repeat the flag or separate ids with commas; or give ids as arguments); not with the filters")
	typ := fs.String("type", "", "filter: only events of this event `type`")
	code := fs.String("code", "", "filter: only events whose last error `code` is this (e.g. handler_error)")
	before := fs.String("failed-before", "", "filter: only events that failed before this `time` (RFC 3339)")
	limit := intRangeFlag(fs, "limit", admin.DefaultReplayLimit, 1, admin.MaxReplayLimit, "filter: at most this many `events`")
	yes := fs.Bool("yes", false, "really replay; without it, print what would be replayed")
	audited := noAuditFlag(fs)
	return func(e *env) error {
		for _, arg := range e.args {
			if err := ids.Set(arg); err != nil {
				return usagef("%v", err)
			}
		}
		c, err := parseCode(*code)
		if err != nil {
			return err
		}
		p := admin.ReplayParams{IDs: ids, Type: *typ, Code: c, DryRun: !*yes, Actor: audited()}
		if p.FailedBefore, err = parseTime("-failed-before", *before); err != nil {
			return err
		}
		if len(ids) == 0 {
			p.Limit = *limit
		} else if flagSet(fs, "limit") || p.Type != "" || p.Code != "" || *before != "" {
			return usagef("event ids (-id or arguments) cannot be combined with -type, -code, -failed-before or -limit")
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		res, err := a.Replay(e.ctx, p)
		if err != nil {
			return asUsage(err)
		}
		return e.printReplay(p, res)
	}
}

func (e *env) printReplay(p admin.ReplayParams, res admin.ReplayResult) error {
	if p.DryRun {
		if e.json {
			out := map[string]any{"dry_run": true, "would_replay": len(res.Replayed), "skipped": len(res.Skipped)}
			if len(res.Conflicts) > 0 {
				out["conflicts"] = len(res.Conflicts)
			}
			return e.printJSON(out)
		}
		e.printf("dry run: would replay %s in %s", plural(len(res.Replayed), "FAILED event", "FAILED events"), e.table.WithDefaults())
		if len(p.IDs) > 0 {
			e.printf("; %d of the named ids would be skipped (not FAILED or missing)", len(res.Skipped))
		}
		if len(res.Conflicts) > 0 {
			e.printf("; %s would stay dead letters (the outbox table already holds their id)", plural(len(res.Conflicts), "event", "events"))
		}
		e.printf("\nnothing was changed; run again with -yes to replay\n")
		return nil
	}
	if e.json {
		return e.printJSON(res)
	}
	for _, id := range res.Replayed {
		e.printf("replayed %s\n", id)
	}
	conflict := make(map[uuid.UUID]bool, len(res.Conflicts))
	for _, id := range res.Conflicts {
		conflict[id] = true
		e.printf("kept     %s (a dead letter whose id the outbox table already holds)\n", id)
	}
	for _, id := range res.Skipped {
		if !conflict[id] {
			e.printf("skipped  %s (not FAILED, missing, or locked)\n", id)
		}
	}
	e.printf("%s replayed, %d skipped\n", plural(len(res.Replayed), "event", "events"), len(res.Skipped))
	if len(res.Conflicts) > 0 {
		e.printf("%s kept as dead letters: the outbox table already holds their id (inspect both)\n",
			plural(len(res.Conflicts), "event", "events"))
	}
	return nil
}

func purgeFlags(fs *flag.FlagSet) func(*env) error {
	status := fs.String("status", "", "purge events in this `status`: sent or failed (required)")
	olderThan := durationFlag{min: 0}
	fs.Var(&olderThan, "older-than", "purge events that reached the status more than this `duration` ago, e.g. 720h; 0s for all (required)")
	limit := intRangeFlag(fs, "limit", admin.DefaultPurgeLimit, 1, admin.MaxPurgeLimit, "delete at most this many `events`")
	yes := fs.Bool("yes", false, "really delete; without it, print how many would be deleted")
	audited := noAuditFlag(fs)
	return func(e *env) error {
		st, err := parseStatus("-status", *status, false)
		if err != nil {
			return err
		}
		if !olderThan.set {
			return usagef("-older-than is required (0s purges every %s event)", st)
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		p := admin.PurgeParams{Status: st, OlderThan: olderThan.d, Limit: *limit, DryRun: !*yes, Actor: audited()}
		n, err := a.Purge(e.ctx, p)
		if err != nil {
			return asUsage(err)
		}
		if e.json {
			return e.printJSON(map[string]any{"dry_run": p.DryRun, "status": st, "count": n})
		}
		events := plural(n, string(st)+" event", string(st)+" events")
		if p.DryRun {
			e.printf("dry run: would delete %s older than %s from %s (at most %d per call)\nnothing was changed; run again with -yes to delete\n",
				events, p.OlderThan, e.table.WithDefaults(), p.Limit)
			return nil
		}
		e.printf("deleted %s older than %s\n", events, p.OlderThan)
		return nil
	}
}

func migrateFlags(fs *flag.FlagSet) func(*env) error {
	keyOrder := fs.Bool("key-order", false, "keep (or build, concurrently) the per-key order index that dispatchers "+
		"with Ordering PerKey need (migrations.Config.KeyOrder)")
	return func(e *env) error {
		conn, err := e.connect()
		if err != nil {
			return err
		}
		cfg := migrations.Config{Table: e.table, KeyOrder: *keyOrder}
		if err := migrations.Migrate(e.ctx, conn, cfg); err != nil {
			return err
		}
		v, err := migrations.Version(e.ctx, conn, cfg)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(map[string]any{"table": e.table.WithDefaults().String(), "version": v})
		}
		e.printf("%s is at schema version %d\n", e.table.WithDefaults(), v)
		return nil
	}
}

func verifyFlags(*flag.FlagSet) func(*env) error {
	return func(e *env) error {
		conn, err := e.connect()
		if err != nil {
			return err
		}
		cfg := migrations.Config{Table: e.table}
		t := e.table.WithDefaults()
		err = migrations.Verify(e.ctx, conn, cfg)
		var verr *migrations.VerifyError
		switch {
		case err == nil && e.json:
			return e.printJSON(map[string]any{"table": t.String(), "ok": true, "problems": []migrations.Problem{}})
		case err == nil:
			e.printf("%s matches schema version %d\n", t, migrations.Latest())
			return nil
		case !errors.As(err, &verr):
			return err
		}
		problems := slices.Clone(verr.Problems)
		for i, p := range problems {
			problems[i].Actual = strings.Replace(p.Actual, "(run Migrate)", "(run outboxctl migrate)", 1)
		}
		fix := e.verifyFix(conn, cfg, verr)
		if e.json {
			err = e.printJSON(map[string]any{"table": t.String(), "ok": false, "problems": problems, "fix": fix})
		} else {
			rows := make([][]string, len(problems))
			for i, p := range problems {
				rows[i] = []string{p.Object, p.Expected, p.Actual}
			}
			err = e.printTable([]string{"OBJECT", "EXPECTED", "ACTUAL"}, rows, "\nto fix: "+fix)
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s does not match: %s", t, plural(len(problems), "problem", "problems"))
	}
}

// verifyFix says what to do about verr, by the table's schema version:
// migrate it (naming the command), upgrade outboxctl, or repair objects
// that were changed by hand.
func (e *env) verifyFix(conn *pgx.Conn, cfg migrations.Config, verr error) string {
	t := e.table.WithDefaults()
	v, err := migrations.Version(e.ctx, conn, cfg)
	switch latest := migrations.Latest(); {
	case err != nil || v > 0 && v < latest || errors.Is(verr, outbox.ErrMissingTable):
		return fmt.Sprintf("run `outboxctl migrate -schema %s -table %s` with the same database URL, on a direct "+
			"connection (not through a transaction-mode pooler); or apply the SQL files of migrations.Render (docs/schema.md)",
			t.Schema, t.Name)
	case v == 0:
		return fmt.Sprintf("the table exists but has no schema version (%s_schema_version is missing or empty): it was not "+
			"created by the migrations, or its version table was dropped, and outboxctl migrate would try to create it again; "+
			"compare it with the SQL files of migrations.Render and record the version they reach (docs/schema.md)", t)
	case v > latest:
		return fmt.Sprintf("the table is at schema version %d, newer than this outboxctl knows (%d): "+
			"use the outboxctl of the pgoutbox version that migrated it", v, latest)
	default:
		return fmt.Sprintf("the table is at schema version %d but its objects differ from what the migrations create, "+
			"so they were changed outside them and outboxctl migrate will not repair them: restore each object "+
			"listed to its EXPECTED definition (docs/schema.md)", v)
	}
}

// parseStatus reads a status flag in any case. Empty is allowed only when
// optional; purge accepts SENT and FAILED only.
func parseStatus(name, v string, optional bool) (outbox.Status, error) {
	st := outbox.Status(strings.ToUpper(v))
	switch {
	case v == "" && optional:
		return "", nil
	case optional && st.Valid():
		return st, nil
	case !optional && (st == outbox.StatusSent || st == outbox.StatusFailed):
		return st, nil
	case optional:
		return "", usagef("%s %q: must be pending, processing, sent or failed", name, v)
	default:
		return "", usagef("%s %q: must be sent or failed", name, v)
	}
}

// parseTime reads an RFC 3339 time flag; empty is the zero time.
func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef("%s %q is not an RFC 3339 time (e.g. 2024-05-01T10:00:00Z)", name, v)
	}
	return t, nil
}

// flagSet reports whether the flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// fieldFlags names the flag that carries each admin parameter field.
var fieldFlags = map[string]string{
	"Status": "-status", "Type": "-type", "AggregateID": "-aggregate-id", "Code": "-code",
	"After": "-after", "Limit": "-limit", "IDs": "-id", "FailedBefore": "-failed-before",
	"OlderThan": "-older-than", "group": "-group", "key": "-key", "Key": "-key",
	"CreatedAfter": "-created-after", "CreatedBefore": "-created-before",
}

// asUsage turns the admin package's input errors into usage errors, named
// by the flag that carried the field ("-after is not valid UTF-8", not
// "After is not valid UTF-8").
func asUsage(err error) error {
	var in *outbox.InputError
	if errors.As(err, &in) {
		if flag, ok := fieldFlags[in.Field]; ok {
			msg := flag + " " + in.Reason
			if in.Err != nil {
				msg += ": " + in.Err.Error()
			}
			return usagef("%s", msg)
		}
	}
	if errors.Is(err, outbox.ErrInvalidInput) {
		return usagef("%v", err)
	}
	return err
}

// printable reports whether the payload prints as text: valid UTF-8
// without control characters other than tab and newline.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}
