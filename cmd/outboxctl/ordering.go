package main

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/admin"
)

func blockedFlags(fs *flag.FlagSet) func(*env) error {
	after := fs.String("after", "", "continue after this `key` (printed at the end of the previous page)")
	limit := intRangeFlag(fs, "limit", admin.DefaultBlockedLimit, 1, admin.MaxBlockedLimit, "page `size` in blocked keys")
	byType := fs.Bool("by-type", false, "list blocked (key, type) pairs: for dispatchers with OrderScope ScopeKeyAndType")
	return func(e *env) error {
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		page, err := blockedPage(e.ctx, a, admin.BlockedParams{After: *after, Limit: *limit, ByType: *byType})
		if err != nil {
			return asUsage(err)
		}
		if e.json {
			return e.printJSON(page)
		}
		if page.KeyOrderOff {
			_, err := fmt.Fprintf(e.out, "blocked keys not computed for %s: the table has no valid order index, which only "+
				"dispatchers with Ordering PerKey need (they build it at start, or migrations.Config.KeyOrder does; "+
				"see docs/ordering.md)\n", a.Table())
			return err
		}
		rows := make([][]string, len(page.Keys))
		for i, k := range page.Keys {
			failed := "-"
			if k.FailedAt != nil {
				failed = k.FailedAt.Format(time.RFC3339)
			}
			waiting := fmt.Sprint(k.Waiting)
			if k.WaitingCapped {
				waiting += "+"
			}
			rows[i] = []string{k.Key, k.HeadID.String(), k.Type, string(k.Code), failed, waiting}
		}
		keys := plural(len(rows), "blocked key", "blocked keys")
		if *byType {
			keys = plural(len(rows), "blocked key and type", "blocked keys and types")
		}
		footer := keys + "; no more pages"
		if page.Next != "" {
			footer = keys + "; next page: -after " + shellWord(page.Next)
		}
		if len(rows) > 0 {
			footer += "\nunblock a key: outboxctl replay -id <head id> (deliver it again) or outboxctl skip <head id> (go on without it)"
		}
		return e.printTable([]string{"KEY", "HEAD_ID", "TYPE", "CODE", "FAILED_AT", "WAITING"}, rows, footer)
	}
}

// blockedPage reads pages of admin.BlockedKeys from p.After until it
// holds p.Limit keys (or pairs, by type: perhaps a few more) or the walk
// ends: each call examines a bounded number of keys and may return fewer
// blocked keys than asked, even none. On a table without the order index
// it returns the first page, empty with KeyOrderOff.
func blockedPage(ctx context.Context, a *admin.Admin, p admin.BlockedParams) (admin.BlockedPage, error) {
	out := admin.BlockedPage{Keys: []admin.BlockedKey{}, Next: p.After}
	limit := p.Limit
	for {
		p.After, p.Limit = out.Next, limit-len(out.Keys)
		page, err := a.BlockedKeys(ctx, p)
		if err != nil || page.KeyOrderOff {
			return page, err
		}
		out.Keys = append(out.Keys, page.Keys...)
		out.Next = page.Next
		out.Scanned += page.Scanned
		if out.Next == "" || len(out.Keys) >= limit {
			return out, nil
		}
	}
}

// plainWord matches a word that a POSIX shell reads as itself.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellWord returns s as one word for a POSIX shell: as it is when that
// is safe, else in single quotes.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func skipFlags(fs *flag.FlagSet) func(*env) error {
	var ids idsFlag
	fs.Var(&ids, "id", "skip this event `id` (repeat the flag or separate ids with commas; or give ids as arguments)")
	yes := fs.Bool("yes", false, "really skip; without it, print what would be skipped")
	audited := noAuditFlag(fs)
	return func(e *env) error {
		for _, arg := range e.args {
			if err := ids.Set(arg); err != nil {
				return usagef("%v", err)
			}
		}
		if len(ids) == 0 {
			return usagef("name at least one FAILED event id")
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		p := admin.SkipParams{IDs: ids, DryRun: !*yes, Actor: audited()}
		res, err := a.SkipHeads(e.ctx, p)
		if err != nil {
			return asUsage(err)
		}
		return e.printSkip(p, res)
	}
}

func (e *env) printSkip(p admin.SkipParams, res admin.SkipResult) error {
	if p.DryRun {
		if e.json {
			return e.printJSON(map[string]any{"dry_run": true, "would_skip": res.Skipped})
		}
		e.printf("dry run: would skip %s in %s\nnothing was changed; run again with -yes to skip\n",
			plural(len(res.Skipped), "FAILED event", "FAILED events"), e.table.WithDefaults())
		return nil
	}
	if e.json {
		return e.printJSON(res)
	}
	for i, id := range res.Skipped {
		e.printf("skipped %s (at %s)\n", id, skippedAt(res, i))
	}
	e.printf("%s skipped; they stay FAILED, and their keys go on\n", plural(len(res.Skipped), "event", "events"))
	return nil
}

// skippedAt returns the time the i-th skipped row carries, or "-".
func skippedAt(res admin.SkipResult, i int) string {
	if i >= len(res.At) {
		return "-"
	}
	return res.At[i].Format(time.RFC3339)
}
