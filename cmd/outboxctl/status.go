package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/admin"
)

// status -watch intervals.
const (
	defaultWatchInterval = 2 * time.Second
	// minWatchInterval keeps a watch at a human pace: each redraw reads
	// the whole table.
	minWatchInterval = time.Second
)

// clearScreen moves a terminal's cursor home and clears the screen, so
// that each status -watch frame replaces the last.
const clearScreen = "\x1b[H\x1b[2J"

func statusFlags(fs *flag.FlagSet) func(*env) error {
	watch := fs.Bool("watch", false, "redraw every -interval until interrupted (Ctrl-C)")
	interval := minDurationFlag(fs, "interval", defaultWatchInterval, minWatchInterval,
		fmt.Sprintf("with -watch, the `time` between redraws, at least %s", minWatchInterval))
	return func(e *env) error {
		if flagSet(fs, "interval") && !*watch {
			return usagef("-interval needs -watch")
		}
		if log, err := e.statusOfLog(); log || err != nil {
			return err
		}
		a, err := e.newAdmin()
		if err != nil {
			return err
		}
		for frame := 0; ; frame++ {
			s, err := a.Summary(e.ctx)
			if err != nil {
				if *watch && e.ctx.Err() != nil {
					return nil // interrupted during a read
				}
				return err
			}
			if err := e.printStatus(s, frame, *watch, *interval); err != nil {
				return err
			}
			if !*watch {
				return nil
			}
			select {
			case <-e.ctx.Done():
				return nil
			case <-time.After(*interval):
			}
		}
	}
}

// printStatus writes one frame of status: as JSON, or as tables, after a
// clear-screen on a terminal when watching or a blank line between
// frames elsewhere.
func (e *env) printStatus(s admin.Summary, frame int, watch bool, interval time.Duration) error {
	if e.json {
		return e.printJSON(s)
	}
	var b strings.Builder
	f := *e
	f.out = &b
	switch {
	case watch && e.tty:
		b.WriteString(clearScreen)
	case frame > 0:
		b.WriteString("\n")
	}
	t := e.table.WithDefaults()
	fmt.Fprintf(&b, "%s at %s (database time)", t, s.Counts.At.Format(time.RFC3339))
	if watch {
		fmt.Fprintf(&b, ", every %s; Ctrl-C to stop", interval)
	}
	b.WriteString("\n\n")
	footer := "oldest PENDING event: none"
	if s.Counts.Pending > 0 {
		footer = fmt.Sprintf("oldest PENDING event: created %s ago", s.OldestPendingAge.Round(time.Millisecond))
	}
	if s.Counts.Due > 0 {
		footer += fmt.Sprintf("\noldest due event: waiting for %s", s.Counts.OldestDueAge.Round(time.Millisecond))
	}
	footer += sentNote(s.Counts) + blockedNote(s.Counts) + unmovedNote(s.Counts)
	if err := f.printTable([]string{"STATUS", "COUNT"}, countRows(s.Counts), footer); err != nil {
		return err
	}
	b.WriteString("\n")
	err := printList(&f, s.ByType, "no events", []string{"TYPE", "PENDING", "DUE", "PROCESSING", "SENT", "FAILED"},
		func(c admin.TypeCounts) []string {
			sent := fmt.Sprint(c.Sent)
			if s.Counts.SentEstimated {
				sent = "-" // not counted by type past admin.SentCountLimit
			}
			return []string{c.Type, fmt.Sprint(c.Pending), fmt.Sprint(c.Due), fmt.Sprint(c.Processing), sent, fmt.Sprint(c.Failed)}
		})
	if err != nil {
		return err
	}
	b.WriteString("\n")
	err = printList(&f, s.FailedByCode, "no FAILED events", []string{"FAILED BY CODE", "COUNT"},
		func(c admin.CodeCount) []string { return []string{string(c.Code), fmt.Sprint(c.Count)} })
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(e.out, b.String())
	return err
}

// printList writes a table with header and one row per item, or the
// line empty when there are none.
func printList[T any](e *env, items []T, empty string, header []string, row func(T) []string) error {
	if len(items) == 0 {
		e.printf("%s\n", empty)
		return nil
	}
	rows := make([][]string, len(items))
	for i, it := range items {
		rows[i] = row(it)
	}
	return e.printTable(header, rows, "")
}

// statusOfLog prints the relay's state when -table names a log
// (outbox.KindLog) rather than an outbox, and reports whether it did.
func (e *env) statusOfLog() (bool, error) {
	conn, err := e.connect()
	if err != nil {
		return false, err
	}
	log, err := e.isLog(conn)
	if err != nil || !log {
		return false, err
	}
	r, err := admin.NewRelay(conn, admin.RelayConfig{Log: e.table})
	if err != nil {
		return true, err
	}
	s, err := r.Status(e.ctx)
	if err != nil {
		return true, err
	}
	return true, e.printRelayStatus(s)
}
