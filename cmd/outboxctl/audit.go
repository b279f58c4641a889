package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/admin"
)

// actor is who runs replay, skip and purge with -yes, as their audit
// rows (admin.AuditLog) name them: $USER (else "unknown") @ the host
// name (else "unknown"), from source outboxctl.
func actor() *admin.Actor {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	name := cmp.Or(os.Getenv("USER"), "unknown") + "@" + host
	if len(name) > admin.MaxActorName {
		name = name[:admin.MaxActorName]
	}
	return &admin.Actor{Name: strings.ToValidUTF8(name, "?"), Source: admin.SourceOutboxctl}
}

// noAuditFlag adds -no-audit to replay, skip or purge and returns the
// actor their -yes run is audited as: actor(), or nil with -no-audit.
func noAuditFlag(fs *flag.FlagSet) func() *admin.Actor {
	off := fs.Bool("no-audit", false, "do not write an audit row (for a role without INSERT on <table>_audit, or a schema older than version 13)")
	return func() *admin.Actor {
		if *off {
			return nil
		}
		return actor()
	}
}

func auditFlags(fs *flag.FlagSet) func(*env) error {
	after := fs.Int64("after", 0, "continue after this entry `id` (printed at the end of the previous page)")
	limit := intRangeFlag(fs, "limit", admin.DefaultAuditLimit, 1, admin.MaxAuditLimit, "page `size`")
	return func(e *env) error {
		if *after < 0 {
			return usagef("-after %d: must be an entry id (0 for the newest)", *after)
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		page, err := a.AuditLog(e.ctx, admin.AuditParams{After: *after, Limit: *limit})
		if err != nil {
			return asUsage(err)
		}
		if e.json {
			return e.printJSON(page)
		}
		rows := make([][]string, len(page.Entries))
		for i, en := range page.Entries {
			filter, err := json.Marshal(en.Filter)
			if err != nil {
				return err
			}
			rows[i] = []string{fmt.Sprint(en.ID), en.At.Format(time.RFC3339), cell(en.Actor), cell(en.Source), cell(en.Action),
				fmt.Sprint(en.Rows), cell(string(filter))}
		}
		entries := plural(len(rows), "entry", "entries")
		footer := entries + "; no more pages"
		if page.Next != 0 {
			footer = entries + "; next page: -after " + fmt.Sprint(page.Next)
		}
		return e.printTable([]string{"ID", "AT", "ACTOR", "SOURCE", "ACTION", "ROWS", "FILTER"}, rows, footer)
	}
}

// cell is s as a table cell: as it is when it prints as one line of
// text, else quoted with Go escapes (so that no control character
// reaches the terminal).
func cell(s string) string {
	if printable([]byte(s)) && !strings.ContainsAny(s, "\n\t") {
		return s
	}
	return strconv.Quote(s)
}
