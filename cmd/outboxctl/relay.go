package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// relayArgs is the relay command's first argument(s), its subcommands.
const relayArgs = "<status|groups|parked|replay|skip|resume|group create|group drop|maintain>"

// newRelay returns an admin.Relay on the command's connection, for the
// log named by -schema/-table.
func (e *env) newRelay() (*admin.Relay, error) {
	conn, err := e.connect()
	if err != nil {
		return nil, err
	}
	return admin.NewRelay(conn, admin.RelayConfig{Log: e.table})
}

// relayOpts are the relay command's flags.
type relayOpts struct {
	group, key, from, after *string
	events, payload, yes    *bool
	noKey                   *bool
	limit                   *int
}

func relayFlags(fs *flag.FlagSet) func(*env) error {
	o := relayOpts{
		group:   fs.String("group", "", "the consumer `group`"),
		key:     fs.String("key", "", "with replay and skip: the parked `key`"),
		from:    fs.String("from", "latest", "with group create: where the cursor starts, `latest` (new events) or oldest (the oldest tick kept)"),
		after:   fs.String("after", "", "with parked: continue after this key (with -events: this seq), printed at the end of the previous page"),
		events:  fs.Bool("events", false, "with parked: list the parked events rather than the keys (-key: of that key only)"),
		payload: fs.Bool("payload", false, "with parked -events: print each event's payload and headers"),
		noKey:   fs.Bool("no-key", false, "with replay and skip: the events parked without a key (each parked alone, under the empty key), instead of -key"),
		yes:     fs.Bool("yes", false, "with replay, skip and group drop: really do it; without it, print what would be done"),
		limit:   intRangeFlag(fs, "limit", admin.DefaultParkedLimit, 1, admin.MaxParkedLimit, "with parked: page `size`"),
	}
	return func(e *env) error {
		sub, err := relaySub(e.args)
		if err != nil {
			return err
		}
		if err := o.check(sub); err != nil {
			return err
		}
		r, err := e.newRelay()
		if err != nil {
			return err
		}
		return asUsage(o.run(e, r, sub))
	}
}

// relaySub returns the subcommand named by the positional arguments.
func relaySub(args []string) (string, error) {
	if len(args) == 0 {
		return "", usagef("a subcommand is needed: %s", relayArgs)
	}
	sub, rest := args[0], args[1:]
	if sub == "group" {
		if len(rest) == 0 || rest[0] != "create" && rest[0] != "drop" {
			return "", usagef("group needs create or drop")
		}
		sub, rest = "group "+rest[0], rest[1:]
	}
	switch sub {
	case "status", "groups", "parked", "replay", "skip", "resume", "group create", "group drop", "maintain":
	default:
		return "", usagef("unknown subcommand %q: want %s", sub, relayArgs)
	}
	if len(rest) > 0 {
		return "", usagef("unexpected argument %q", rest[0])
	}
	return sub, nil
}

// check checks the flags a subcommand needs, before anything connects.
func (o relayOpts) check(sub string) error {
	switch sub {
	case "parked", "replay", "skip", "resume", "group create", "group drop":
		if *o.group == "" {
			return usagef("relay %s needs -group", sub)
		}
	}
	if (sub == "replay" || sub == "skip") && (*o.key == "") == !*o.noKey {
		return usagef("relay %s needs -key, or -no-key for the events parked without one", sub)
	}
	if *o.from != "latest" && *o.from != "oldest" {
		return usagef("-from is %q, want latest or oldest", *o.from)
	}
	if *o.payload && !*o.events {
		return usagef("-payload needs -events")
	}
	return nil
}

func (o relayOpts) run(e *env, r *admin.Relay, sub string) error {
	g := *o.group
	switch sub {
	case "status":
		s, err := r.Status(e.ctx)
		if err != nil {
			return err
		}
		return e.printRelayStatus(s)
	case "groups":
		gs, err := r.Groups(e.ctx)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(gs)
		}
		return e.printGroups(gs)
	case "parked":
		if *o.events {
			return o.parkedEvents(e, r)
		}
		return o.parkedKeys(e, r)
	case "replay", "skip":
		return o.request(e, r, sub)
	case "resume":
		was, err := r.Resume(e.ctx, g)
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(map[string]any{"group": g, "was_stopped": was != "", "stopped_reason": was})
		}
		if was == "" {
			e.printf("group %q was not stopped; nothing changed\n", g)
			return nil
		}
		e.printf("group %q resumed (it had stopped: %s); its reader reads again\n", g, was)
		return nil
	case "group create":
		from := admin.FromLatest
		if *o.from == "oldest" {
			from = admin.FromOldest
		}
		if err := r.CreateGroup(e.ctx, g, from); err != nil {
			return err
		}
		e.printf("group %q created at the %s tick\n", g, *o.from)
		return nil
	case "group drop":
		return o.drop(e, r)
	}
	res, err := r.Maintain(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(res)
	}
	e.printf("parts truncated: %d, busy (tried next time): %d, dropped: %d, empty parts waiting: %d; ticks deleted: %d\n",
		res.Truncated, res.Busy, res.Dropped, res.Waiting, res.TicksDeleted)
	if res.Waiting > 0 && !res.Owner {
		e.printf("this role does not own %s: run outboxctl relay maintain as its owner to detach and drop the empty parts\n", r.Log())
	}
	return nil
}

func (o relayOpts) request(e *env, r *admin.Relay, sub string) error {
	g, key := *o.group, *o.key
	if !*o.yes {
		events, err := r.ParkedEvents(e.ctx, g, admin.ParkedEventsQuery{Key: key, NoKey: *o.noKey, Limit: admin.MaxParkedLimit})
		if err != nil {
			return err
		}
		n := strconv.Itoa(len(events))
		if len(events) == admin.MaxParkedLimit {
			n = "at least " + n
		}
		e.printf("dry run: would request %s of key %q of group %q (%s parked events)\nnothing was changed; run again with -yes to request it\n",
			sub, key, g, n)
		return nil
	}
	do := r.RequestReplay
	if sub == "skip" {
		do = r.RequestSkip
	}
	if err := do(e.ctx, g, key); err != nil {
		return err
	}
	e.printf("requested %s of key %q of group %q: the reader holding the group carries it out at its next batch boundary "+
		"(outboxctl relay parked shows the request until then)\n", sub, key, g)
	return nil
}

func (o relayOpts) drop(e *env, r *admin.Relay) error {
	g := *o.group
	if !*o.yes {
		grp, err := r.Group(e.ctx, g)
		if err != nil {
			return err
		}
		e.printf("dry run: would drop group %q (cursor at tick %d, %s behind, %s parked) and its parked events\n"+
			"nothing was changed; run again with -yes to drop it\n", g, grp.LastTick, plural(grp.LagEvents, "event", "events"),
			plural(grp.ParkedKeys, "key", "keys"))
		return nil
	}
	if err := r.DropGroup(e.ctx, g); err != nil {
		return err
	}
	e.printf("group %q dropped; the log's retention no longer waits for it\n", g)
	return nil
}

func (o relayOpts) parkedKeys(e *env, r *admin.Relay) error {
	keys, err := r.ParkedKeys(e.ctx, *o.group, admin.ParkedKeysQuery{After: *o.after, Limit: *o.limit})
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(keys)
	}
	rows := make([][]string, len(keys))
	for i, k := range keys {
		req := ""
		switch {
		case k.ReplayRequestedAt != nil:
			req = "replay requested " + k.ReplayRequestedAt.Format(time.RFC3339)
		case k.SkipRequestedAt != nil:
			req = "skip requested " + k.SkipRequestedAt.Format(time.RFC3339)
		}
		rows[i] = []string{k.Key, fmt.Sprint(k.Events), k.ParkedAt.Format(time.RFC3339), k.ErrorCode, k.Error, req}
	}
	footer := plural(len(rows), "key", "keys") + "; no more pages"
	if len(keys) == *o.limit {
		footer = plural(len(rows), "key", "keys") + "; next page: -after " + strconv.Quote(keys[len(keys)-1].Key)
	}
	return e.printTable([]string{"KEY", "EVENTS", "PARKED_AT", "ERROR_CODE", "ERROR", "REQUEST"}, rows, footer)
}

func (o relayOpts) parkedEvents(e *env, r *admin.Relay) error {
	var after int64
	if *o.after != "" {
		v, err := strconv.ParseInt(*o.after, 10, 64)
		if err != nil || v < 0 {
			return usagef("-after %q is not a seq", *o.after)
		}
		after = v
	}
	events, err := r.ParkedEvents(e.ctx, *o.group, admin.ParkedEventsQuery{Key: *o.key, AfterSeq: after, Limit: *o.limit,
		WithPayload: *o.payload})
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(events)
	}
	header := []string{"SEQ", "ID", "TYPE", "KEY", "PAYLOAD_BYTES", "PARKED_AT", "ERROR_CODE", "ERROR"}
	if *o.payload {
		header = append(header, "HEADERS", "PAYLOAD")
	}
	rows := make([][]string, len(events))
	for i, ev := range events {
		rows[i] = []string{fmt.Sprint(ev.Seq), ev.ID.String(), ev.Type, ev.Key, fmt.Sprint(ev.PayloadSize),
			ev.ParkedAt.Format(time.RFC3339), ev.ErrorCode, ev.Error}
		if *o.payload {
			rows[i] = append(rows[i], headerText(ev.Headers), payloadText(ev.Payload))
		}
	}
	footer := plural(len(rows), "event", "events") + "; no more pages"
	if len(events) == *o.limit {
		footer = plural(len(rows), "event", "events") + "; next page: -after " + fmt.Sprint(events[len(events)-1].Seq)
	}
	return e.printTable(header, rows, footer)
}

// headerText prints headers on one line, k=v separated by commas.
func headerText(h map[string]string) string {
	parts := make([]string, 0, len(h))
	for k, v := range h {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// payloadText is the payload as text when printable (and without tabs
// or newlines, which would break the table), else base64.
func payloadText(p []byte) string {
	if printable(p) && !strings.ContainsAny(string(p), "\t\n") {
		return string(p)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(p)
}

// printGroups writes the groups table.
func (e *env) printGroups(gs []admin.Group) error {
	if len(gs) == 0 {
		e.printf("no consumer groups: nothing is delivered, and the log keeps every event (outboxctl relay group create)\n")
		return nil
	}
	rows := make([][]string, len(gs))
	for i, g := range gs {
		holder := "-"
		if g.Leased {
			holder = g.Owner
		}
		rows[i] = []string{g.Name, fmt.Sprint(g.LastTick), holder, fmt.Sprint(g.LagEvents),
			(time.Duration(g.LagSeconds * float64(time.Second))).Round(time.Millisecond).String(), fmt.Sprint(g.ParkedKeys), g.StoppedReason}
	}
	return e.printTable([]string{"GROUP", "LAST_TICK", "LEASE_HOLDER", "LAG_EVENTS", "LAG", "PARKED_KEYS", "STOPPED"}, rows, "")
}

// printRelayStatus writes the log's ticker, tick, parts and groups.
func (e *env) printRelayStatus(s admin.RelayStatus) error {
	if e.json {
		return e.printJSON(s)
	}
	ticker := "no relay holds the ticker's lease"
	if s.TickerLeased {
		ticker = "ticker: " + s.TickerOwner
	}
	e.printf("%s (log)\n%s; newest tick %d, %s old\nparts: %d attached, head-room %d transaction ids (%.1f parts)\n\n",
		e.table.WithDefaults(), ticker, s.NewestTick, s.TickAge.Round(time.Millisecond), s.Parts, s.HeadroomXids,
		float64(s.HeadroomXids)/float64(sqlname.LogPartXids))
	return e.printGroups(s.Groups)
}

// isLog reports whether the command's table is a log (it has a cursors
// table): status then shows the relay's state.
func (e *env) isLog(conn *pgx.Conn) (bool, error) {
	var ok bool
	names, err := sqlname.For(e.table)
	if err != nil {
		return false, err
	}
	err = conn.QueryRow(e.ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`,
		names.Qualified, names.Log(sqlname.SuffixCursors)).Scan(&ok)
	return ok, err
}
