package pgoutboxtest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// RequireEmitted fails the test unless exactly one event in table matches
// want, and returns that event so the test can look deeper. Pass the
// transaction that emitted as db to check before it commits; a pool sees
// committed events only. The zero table is public.outbox_events.
//
// More than one match fails too, since the event to return would be
// ambiguous: narrow want (by ID or aggregate, say) or use
// [RequireManyEmitted]. The returned event carries the row's ID, type,
// aggregate, keys, content type, headers, payload and CreatedAt; Attempt
// and Delay are zero.
func RequireEmitted(ctx context.Context, tb TB, db DB, table outbox.Table, want Want) outbox.Event {
	tb.Helper()
	const name = "RequireEmitted"
	r, ms := prepare(tb, name, table, []Want{want})
	rows, err := r.rowsOfTypes(ctx, db, typesOf([]Want{want}))
	if err != nil {
		fail(tb, name, "%v", err)
		return outbox.Event{}
	}
	matched := matching(rows, ms[0])
	switch len(matched) {
	case 1:
		return matched[0].event
	case 0:
		var b strings.Builder
		fmt.Fprintf(&b, "no event in %s matches %s", r.table, want.describe())
		describeNearMisses(ctx, &b, r, db, rows, ms[0])
		fail(tb, name, "%s", b.String())
	default:
		var b strings.Builder
		fmt.Fprintf(&b, "%s in %s match %s; want exactly one (narrow the Want, or use RequireManyEmitted):",
			events(len(matched)), r.table, want.describe())
		listRows(&b, matched[:min(len(matched), shownRows)], nil)
		fail(tb, name, "%s", b.String())
	}
	return outbox.Event{}
}

// RequireNotEmitted fails the test if any event in table matches want.
// With only Type set it asserts that no event of that type was emitted;
// with more fields set, events of the type that differ in any of them
// pass. A zero Want matches every event: the table must be empty. db and
// table are as for [RequireEmitted].
//
// It passes whenever nothing matches, so it also passes vacuously when
// want is wrong (a misspelt Type, a Status the event never has) or when db
// is a pool or connection that reads before the emitting transaction
// commits. Pair it with a positive [RequireEmitted] (or
// [RequireManyEmitted]) on the same db and table, which proves that the
// rows you expect are visible there.
func RequireNotEmitted(ctx context.Context, tb TB, db DB, table outbox.Table, want Want) {
	tb.Helper()
	const name = "RequireNotEmitted"
	r, ms := prepare(tb, name, table, []Want{want})
	rows, err := r.rowsOfTypes(ctx, db, typesOf([]Want{want}))
	if err != nil {
		fail(tb, name, "%v", err)
		return
	}
	matched := matching(rows, ms[0])
	if len(matched) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %s match %s; want none:", events(len(matched)), r.table, want.describe())
	listRows(&b, matched[:min(len(matched), shownRows)], nil)
	fail(tb, name, "%s", b.String())
}

// RequireManyEmitted fails the test unless the events of the wanted types
// in table match wants one for one, in emit order (the order of the rows'
// insertion), and returns them. Events of other types are ignored; when a
// Want has no Type, every event counts. An event type emitted twice must
// be wanted twice. db and table are as for [RequireEmitted].
func RequireManyEmitted(ctx context.Context, tb TB, db DB, table outbox.Table, wants ...Want) []outbox.Event {
	tb.Helper()
	const name = "RequireManyEmitted"
	if len(wants) == 0 {
		fail(tb, name, "needs at least one Want (to assert that nothing was emitted, use RequireNotEmitted)")
		return nil
	}
	r, ms := prepare(tb, name, table, wants)
	types := typesOf(wants)
	rows, err := r.rowsOfTypes(ctx, db, types)
	if err != nil {
		fail(tb, name, "%v", err)
		return nil
	}
	if allMatch(rows, ms) {
		out := make([]outbox.Event, len(rows))
		for i, x := range rows {
			out[i] = x.event
		}
		return out
	}
	var b strings.Builder
	scope := "the events"
	if types != nil {
		scope = fmt.Sprintf("the events of types %q", types)
	}
	fmt.Fprintf(&b, "%s in %s do not match the %d Wants in emit order (%d found):", scope, r.table, len(wants), len(rows))
	describePairs(&b, rows, ms)
	fail(tb, name, "%s", b.String())
	return nil
}

// prepare validates table and every Want, failing the test on the first
// that cannot be used.
func prepare(tb TB, name string, table outbox.Table, wants []Want) (reader, []matcher) {
	tb.Helper()
	r, err := newReader(table)
	if err != nil {
		fail(tb, name, "%v", err)
		return reader{}, nil
	}
	ms := make([]matcher, len(wants))
	for i, w := range wants {
		if ms[i], err = newMatcher(w); err != nil {
			if len(wants) > 1 {
				err = fmt.Errorf("wants[%d]: %w", i, err)
			}
			fail(tb, name, "%v", err)
			return reader{}, nil
		}
	}
	return r, ms
}

// typesOf lists the distinct types of wants, in order, or returns nil
// (every type) when one of them has no Type.
func typesOf(wants []Want) []string {
	var types []string
	for _, w := range wants {
		if w.Type == "" {
			return nil
		}
		if !slices.Contains(types, w.Type) {
			types = append(types, w.Type)
		}
	}
	return types
}

// matching returns the rows m matches.
func matching(rows []row, m matcher) []row {
	var out []row
	for _, x := range rows {
		if len(m.differences(x)) == 0 {
			out = append(out, x)
		}
	}
	return out
}

// allMatch reports whether rows and ms pair up one for one.
func allMatch(rows []row, ms []matcher) bool {
	if len(rows) != len(ms) {
		return false
	}
	for i, x := range rows {
		if len(ms[i].differences(x)) > 0 {
			return false
		}
	}
	return true
}

// describeNearMisses lists the rows of the wanted type, each with how it
// differs; when there are none, the latest rows of the table, so that the
// reader sees what was emitted instead.
func describeNearMisses(ctx context.Context, b *strings.Builder, r reader, db DB, ofType []row, m matcher) {
	if m.want.Type != "" && len(ofType) > 0 {
		fmt.Fprintf(b, "\n  %s of type %q:", events(len(ofType)), m.want.Type)
		listRows(b, ofType[:min(len(ofType), shownRows)], &m)
		return
	}
	latest, total, err := r.latestRows(ctx, db, shownRows)
	switch {
	case err != nil:
		fmt.Fprintf(b, "\n  (could not list the table: %v)", err)
	case total == 0:
		b.WriteString("\n  the table is empty (in what db sees: a pool sees committed rows only)")
	default:
		fmt.Fprintf(b, "\n  the table holds %s; the latest %d:", events(int(total)), len(latest))
		listRows(b, latest, &m)
	}
}

// describePairs prints each Want next to the row in its place, with how
// they differ, then the rows no Want accounts for.
func describePairs(b *strings.Builder, rows []row, ms []matcher) {
	for i, m := range ms {
		fmt.Fprintf(b, "\n  wants[%d] %s", i, m.want.describe())
		if i >= len(rows) {
			b.WriteString("\n    no event in its place")
			continue
		}
		x := rows[i]
		b.WriteString("\n    " + x.describe())
		if d := m.differences(x); len(d) > 0 {
			b.WriteString("\n        differs: " + strings.Join(d, "; "))
		}
	}
	if extra := len(rows) - len(ms); extra > 0 {
		fmt.Fprintf(b, "\n  %s beyond the Wants:", events(extra))
		listRows(b, rows[len(ms):min(len(rows), len(ms)+shownRows)], nil)
	}
}
