package console

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Overview bounds.
const (
	// activityWindow is the period the overview's activity counts.
	activityWindow = 5 * time.Minute
	// blockedShown is the most blocked keys the overview lists.
	blockedShown = 20
	// healthMaxAge is the maxAge the overview judges dispatchers with.
	healthMaxAge = time.Minute
	// waitingAge is how long a type's oldest due event waits before the
	// overview marks the type as waiting: a type no running dispatcher
	// claims looks like this.
	waitingAge = time.Minute
)

// overviewData is the overview's data. A part that could not be read
// carries its error text instead, so that one failing query does not
// hide the rest during an incident.
type overviewData struct {
	Summary     admin.Summary
	SummaryErr  string
	Activity    admin.Activity
	ActivityErr string
	Window      time.Duration
	PerMinute   activityRates
	Blocked     admin.BlockedPage
	BlockedErr  string
	Types       []typeRow
	TypesErr    string
	Dispatchers []dispatcherRow
	At          time.Time // when the overview was read (database clock when known)
	Fragment    string    // the fragment's URL, for the refresh script
}

// activityRates are the activity counts per minute.
type activityRates struct{ Sent, Retried, Failed float64 }

// statusRow is one row of the counts table.
type statusRow struct {
	Status outbox.Status
	Count  int64
	Approx bool
	Link   string
}

// typeRow is one event type: its counts by status, its PENDING ages, and
// whether an in-process dispatcher claims it.
type typeRow struct {
	admin.TypeCounts
	OldestDueAge time.Duration
	OldestAge    time.Duration
	Unhandled    bool // Config.Dispatchers set and none claims it
	Waiting      bool // its oldest due event waits for waitingAge or more
	Link         string
}

// dispatcherRow is one in-process dispatcher's health.
type dispatcherRow struct {
	N         int
	State     string
	Healthy   string // "" when healthy, else why not
	Circuit   string
	Since     time.Time
	Listener  string
	LastClaim time.Time
}

// overview serves the overview page.
func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	d := h.readOverview(r.Context())
	h.show(w, r, "overview", h.newPage(w, r, "overview", "Overview", d))
}

// overviewFragment serves the overview's #overview element alone, which
// static/console.js fetches every 5 s and swaps in.
func (h *handler) overviewFragment(w http.ResponseWriter, r *http.Request) {
	d := h.readOverview(r.Context())
	p := page{Base: h.cfg.BasePath, Table: h.cfg.Admin.Table().String(), User: userOf(r), Data: d}
	h.render(w, r, http.StatusOK, "overview", "overview-body", p)
}

// readOverview reads every part of the overview, one after the other
// (the Admin may sit on a single connection).
func (h *handler) readOverview(ctx context.Context) overviewData {
	a := h.cfg.Admin
	d := overviewData{Fragment: h.cfg.BasePath + "/fragments/overview", At: time.Now(), Window: activityWindow}
	var err error
	if d.Summary, err = a.Summary(ctx); err != nil {
		d.SummaryErr = h.partError(ctx, "summary", err)
	} else {
		d.At = d.Summary.Counts.At
	}
	if d.Activity, err = a.Activity(ctx, activityWindow); err != nil {
		d.ActivityErr = h.partError(ctx, "activity", err)
	} else {
		minutes := activityWindow.Minutes()
		d.PerMinute = activityRates{float64(d.Activity.Sent) / minutes, float64(d.Activity.Retried) / minutes, float64(d.Activity.Failed) / minutes}
	}
	if d.Blocked, err = a.BlockedKeys(ctx, admin.BlockedParams{Limit: blockedShown}); err != nil {
		d.BlockedErr = h.partError(ctx, "blocked keys", err)
	}
	pending, err := a.PendingByType(ctx)
	if err != nil {
		d.TypesErr = h.partError(ctx, "pending by type", err)
	}
	d.Types = h.typeRows(d.Summary.ByType, pending)
	d.Dispatchers = dispatcherRows(h.cfg.Dispatchers)
	return d
}

// partError logs a part's error and returns the text the page shows.
func (h *handler) partError(ctx context.Context, part string, err error) string {
	h.log.ErrorContext(ctx, "pgoutbox console: overview", "part", part, "err", err)
	return "could not read the " + part + " (see the service's log)"
}

// Counts returns the counts table's rows, one per status.
func (d overviewData) Counts(base string) []statusRow {
	c := d.Summary.Counts
	rows := []statusRow{
		{Status: outbox.StatusPending, Count: c.Pending},
		{Status: outbox.StatusProcessing, Count: c.Processing},
		{Status: outbox.StatusSent, Count: c.Sent, Approx: c.SentEstimated},
		{Status: outbox.StatusFailed, Count: c.Failed},
	}
	for i := range rows {
		rows[i].Link = eventsURL(base, "status", string(rows[i].Status))
	}
	return rows
}

// codeRow is one row of the failed-by-code table.
type codeRow struct {
	Code  string // "(none)" for FAILED events without a code
	Count int64
	Link  string // the list of its FAILED events; "" for a huge code
}

// Codes returns the failed-by-code table's rows, most FAILED first.
func (d overviewData) Codes(base string) []codeRow {
	rows := make([]codeRow, len(d.Summary.FailedByCode))
	for i, c := range d.Summary.FailedByCode {
		rows[i] = codeRow{Code: string(c.Code), Count: c.Count, Link: eventsURL(base, "status", "FAILED", "code", string(c.Code))}
		if c.Code == "" {
			rows[i].Code = "(none)"
		}
	}
	return rows
}

// typeRows joins the summary's counts per type with the PENDING ages per
// type, marking the types no in-process dispatcher claims.
func (h *handler) typeRows(byType []admin.TypeCounts, pending []admin.TypePending) []typeRow {
	rows := make([]typeRow, 0, len(byType))
	for _, tc := range byType {
		rows = append(rows, typeRow{TypeCounts: tc})
	}
	for _, tp := range pending {
		i := slices.IndexFunc(rows, func(r typeRow) bool { return r.Type == tp.Type })
		if i < 0 {
			rows = append(rows, typeRow{TypeCounts: admin.TypeCounts{Type: tp.Type, Pending: tp.Pending, Due: tp.Due}})
			i = len(rows) - 1
		}
		rows[i].OldestDueAge, rows[i].OldestAge = tp.OldestDueAge, tp.OldestAge
	}
	claimed, all := claimedTypes(h.cfg.Dispatchers)
	for i := range rows {
		rows[i].Unhandled = len(h.cfg.Dispatchers) > 0 && !all && rows[i].Pending > 0 && !claimed[rows[i].Type]
		rows[i].Waiting = rows[i].OldestDueAge >= waitingAge
		rows[i].Link = eventsURL(h.cfg.BasePath, "type", rows[i].Type)
	}
	return rows
}

// claimedTypes returns the types the dispatchers claim, or all = true
// when one claims every type.
func claimedTypes(ds []*dispatcher.Dispatcher) (claimed map[string]bool, all bool) {
	claimed = map[string]bool{}
	for _, d := range ds {
		types, every := d.ClaimedTypes()
		if every {
			return nil, true
		}
		for _, t := range types {
			claimed[t] = true
		}
	}
	return claimed, false
}

// dispatcherRows reads the in-process dispatchers' health.
func dispatcherRows(ds []*dispatcher.Dispatcher) []dispatcherRow {
	rows := make([]dispatcherRow, len(ds))
	for i, d := range ds {
		hl := d.Health()
		rows[i] = dispatcherRow{N: i + 1, State: hl.State.String(), Circuit: hl.Circuit.String(), Since: hl.CircuitOpenSince,
			Listener: hl.Listener.String(), LastClaim: hl.LastClaim}
		if err := hl.Healthy(healthMaxAge); err != nil {
			rows[i].Healthy = err.Error()
		}
	}
	return rows
}
