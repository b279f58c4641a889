package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Every action is posted twice: first as a dry run (dry=1, the default),
// which changes nothing and answers a confirmation page with the number
// of events the action would take and a form that posts the same
// parameters with dry=0, expected=N and request=<a random id>; then for
// real, with the user as the audited Actor and the request id as its
// RequestID: a confirmation posted twice (a double click, a resubmitted
// form) acts once, and the second post answers 409 with a result page
// (#result) saying it was done already.

// confirmData is the confirmation page's data.
type confirmData struct {
	Action  string      // replay, skip, purge
	Verb    string      // "Replay", ...
	What    string      // what the action takes, in words
	N       int64       // events that match now
	Capped  bool        // N is a lower bound
	About   bool        // N is an estimate
	Unknown bool        // the number is not known (N is 0 but may not be)
	Note    string      // a bound the action will meet, if any
	Fields  [][2]string // the parameters to post again
	URL     string      // the action's URL
	Back    string      // where "cancel" leads
	Request string      // the confirmation's request id (random, single use)
}

// resultData is the result page's data.
type resultData struct {
	Done      string // "Replayed", "Skipped" or "Purged"
	N         int64
	Skipped   int // named events a replay did not take
	Conflicts int // dead letters a replay kept (their id is in the outbox)
	Back      string
	Already   bool // the confirmation was done already: nothing changed
}

// actionForm is an action's posted parameters.
type actionForm struct {
	dry      bool
	ids      []uuid.UUID
	expected int64
	request  uuid.UUID // the confirmation's request id (zero on a dry run)
}

// readAction reads the fields every action has: dry (anything but "0"
// is a dry run), the repeated id, and expected and request (on a
// confirmation, both required: a confirmation without its single-use
// request id would act again each time it is posted).
func readAction(form url.Values) (actionForm, error) {
	a := actionForm{dry: form.Get("dry") != "0"}
	for _, s := range form["id"] {
		id, err := uuid.Parse(s)
		if err != nil {
			return actionForm{}, badRequestf("an id is not a UUID")
		}
		a.ids = append(a.ids, id)
	}
	if !a.dry {
		n, err := strconv.ParseInt(form.Get("expected"), 10, 64)
		if err != nil || n < 0 {
			return actionForm{}, badRequestf("expected must be the number of events the confirmation showed")
		}
		a.expected = n
		if a.request, err = uuid.Parse(form.Get("request")); err != nil || a.request == uuid.Nil {
			return actionForm{}, badRequestf("request must be the confirmation's request id: run the dry run again")
		}
	}
	return a, nil
}

// idFields are the hidden fields that name ids again.
func idFields(ids []uuid.UUID) [][2]string {
	out := make([][2]string, len(ids))
	for i, id := range ids {
		out[i] = [2]string{"id", id.String()}
	}
	return out
}

// actor is the audited actor of r, confirming act.
func actor(r *http.Request, act actionForm) *admin.Actor {
	return &admin.Actor{Name: userOf(r), Source: admin.SourceConsole, RequestID: act.request}
}

// back returns where a page about ids or a filter leads back to: the
// event when there is one id, else the list with the filter.
func (h *handler) back(ids []uuid.UUID, f filter) string {
	if len(ids) == 1 {
		return h.cfg.BasePath + "/events/" + ids[0].String()
	}
	if q := f.values().Encode(); q != "" {
		return h.cfg.BasePath + "/events?" + q
	}
	return h.cfg.BasePath + "/events"
}

// replay replays FAILED events by id, or those the list's filter
// matches (its FAILED events, at most admin.MaxReplayLimit per
// confirmation, and never more than the confirmation counted).
func (h *handler) replay(w http.ResponseWriter, r *http.Request) {
	act, err := readAction(r.PostForm)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	f, err := parseFilter(r.PostForm)
	if err == nil && len(act.ids) == 0 && !f.Replayable() {
		err = badRequestf("replay takes FAILED events only: clear the status filter or set it to FAILED")
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	f.params.Status = outbox.StatusFailed
	c := confirmData{Action: "replay", Verb: "Replay", What: "FAILED events", URL: h.cfg.BasePath + "/actions/replay", Back: h.back(act.ids, f)}
	if act.dry {
		if err := h.replayDryRun(r.Context(), act, f, &c); err != nil {
			h.fail(w, r, err)
			return
		}
		h.confirm(w, r, c)
		return
	}
	out, err := h.replayNow(r, act, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.result(w, r, resultData{Done: "Replayed", N: int64(len(out.Replayed)), Skipped: len(out.Skipped),
		Conflicts: len(out.Conflicts), Back: c.Back})
}

// replayDryRun fills c with what a replay would take now: the named ids
// that are dead letters (admin's dry run), or the FAILED events the
// filter matches (its count).
func (h *handler) replayDryRun(ctx context.Context, act actionForm, f filter, c *confirmData) error {
	if len(act.ids) > 0 {
		res, err := h.cfg.Admin.Replay(ctx, admin.ReplayParams{IDs: act.ids, DryRun: true})
		c.N, c.Fields = int64(len(res.Replayed)), idFields(act.ids)
		return err
	}
	count, err := h.cfg.Admin.Count(ctx, f.params)
	c.N, c.Capped, c.Fields = count.N, count.Capped, f.Fields()
	if c.N > admin.MaxReplayLimit || c.Capped {
		c.Note = "One confirmation replays at most " + strconv.Itoa(admin.MaxReplayLimit) + " events; run the dry run again for the rest."
	}
	return err
}

// replayNow runs a confirmed replay as the user: by the named ids; or,
// for a filter of type and code alone, as admin's filter replay (whose
// audit row records that filter), at most the confirmed count; or, for
// a filter admin's replay does not take (key, time range), by the ids
// of the first events the list finds, at most the confirmed count.
func (h *handler) replayNow(r *http.Request, act actionForm, f filter) (admin.ReplayResult, error) {
	ctx, limit := r.Context(), min(act.expected, admin.MaxReplayLimit)
	ids := act.ids
	switch {
	case len(ids) > 0:
	case limit == 0:
		return admin.ReplayResult{}, nil
	case f.Key == "" && f.From == "" && f.To == "":
		return h.cfg.Admin.Replay(ctx, admin.ReplayParams{Type: f.Type, Code: outbox.Code(f.Code), Limit: int(limit), Actor: actor(r, act)})
	default:
		var err error
		if ids, err = h.matching(ctx, f.params, limit); err != nil || len(ids) == 0 {
			return admin.ReplayResult{}, err
		}
		by := actor(r, act)
		by.SelectedBy = f.selection()
		return h.cfg.Admin.Replay(ctx, admin.ReplayParams{IDs: ids, Actor: by})
	}
	return h.cfg.Admin.Replay(ctx, admin.ReplayParams{IDs: ids, Actor: actor(r, act)})
}

// matching returns the ids of up to limit events matching p, oldest seq
// first, reading the list page by page.
func (h *handler) matching(ctx context.Context, p admin.ListParams, limit int64) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	for int64(len(ids)) < limit {
		p.Limit = int(min(limit-int64(len(ids)), admin.MaxListLimit))
		pg, err := h.cfg.Admin.List(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, e := range pg.Events {
			ids = append(ids, e.ID)
		}
		if pg.Next.IsZero() {
			break
		}
		p.After = pg.Next
	}
	return ids, nil
}

// skip marks FAILED head events skipped, by id.
func (h *handler) skip(w http.ResponseWriter, r *http.Request) {
	act, err := readAction(r.PostForm)
	if err == nil && len(act.ids) == 0 {
		err = badRequestf("name the FAILED events to skip")
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	c := confirmData{Action: "skip", Verb: "Skip", What: "FAILED events that hold their key", URL: h.cfg.BasePath + "/actions/skip",
		Back: h.back(act.ids, filter{}), Fields: idFields(act.ids)}
	res, err := h.cfg.Admin.SkipHeads(r.Context(), admin.SkipParams{IDs: act.ids, DryRun: act.dry, Actor: h.actorUnlessDry(r, act)})
	var serr *admin.SkipError
	if errors.As(err, &serr) {
		err = badRequestf("%s", serr.Error())
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if act.dry {
		c.N = int64(len(res.Skipped))
		h.confirm(w, r, c)
		return
	}
	h.result(w, r, resultData{Done: "Skipped", N: int64(len(res.Skipped)), Back: c.Back})
}

// actorUnlessDry is the audited actor of a real run, nil for a dry run.
func (h *handler) actorUnlessDry(r *http.Request, act actionForm) *admin.Actor {
	if act.dry {
		return nil
	}
	return actor(r, act)
}

// purge deletes SENT or FAILED events that reached their status before
// a cut-off. The dry run fixes the cut-off (now - older_than) and the
// confirmation form posts it back as before, so that the confirmation
// acts on the set the page showed: a history partition that
// closes in between is not retired, a dead letter that ages past the
// age meanwhile is not taken.
func (h *handler) purge(w http.ResponseWriter, r *http.Request) {
	act, err := readAction(r.PostForm)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	st := outbox.Status(strings.ToUpper(r.PostForm.Get("status")))
	before, err := purgeCutoff(r.PostForm, act.dry, time.Now())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p := admin.PurgeParams{Status: st, Limit: purgeBatch, DryRun: act.dry, Actor: h.actorUnlessDry(r, act)}
	if !act.dry && st == outbox.StatusFailed {
		if act.expected == 0 {
			h.result(w, r, resultData{Done: "Purged", Back: h.cfg.BasePath + "/events"})
			return
		}
		p.Limit = int(min(act.expected, purgeBatch))
	}
	// Admin's cut-off is its database's now() - OlderThan: before, up to
	// the clock skew between this server and the database, which is the
	// same in the dry run and the confirmation.
	p.OlderThan = max(time.Since(before), 0)
	n, err := h.cfg.Admin.Purge(r.Context(), p)
	if err != nil && n > 0 && !act.dry {
		// A SENT purge goes step by step: the committed steps stay (each
		// audited). Say so; posting the same confirmation carries on.
		h.log.ErrorContext(r.Context(), "pgoutbox console: purge stopped partway", "purged", n, "err", err)
		h.showError(w, r, http.StatusInternalServerError, "The purge stopped partway: "+strconv.FormatInt(n, 10)+
			" events were purged (and audited) before it failed. Post the confirmation again to carry on, or run the dry run again.")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	back := h.cfg.BasePath + "/events?status=" + url.QueryEscape(string(st))
	if act.dry {
		h.confirm(w, r, purgeConfirm(st, before, n, h.cfg.BasePath+"/actions/purge", back))
		return
	}
	h.result(w, r, resultData{Done: "Purged", N: n, Back: back})
}

// purgeCutoff returns a purge's cut-off: for a dry run, now less the
// posted age; for a confirmation, the posted before (the
// dry run's), which must not be later than now.
func purgeCutoff(form url.Values, dry bool, now time.Time) (time.Time, error) {
	if dry {
		older, err := parseAge(form.Get("older_than"))
		return now.Add(-older).UTC(), err
	}
	before, err := time.Parse(time.RFC3339, form.Get("before"))
	switch {
	case err != nil:
		return time.Time{}, badRequestf("before must be the cut-off time the dry run showed (RFC 3339)")
	case before.After(now):
		return time.Time{}, badRequestf("before is later than now: run the dry run again")
	}
	return before, nil
}

// purgeConfirm is the confirmation page of a purge's dry run that counted
// n. A FAILED count stops at purgeBatch ("at least"). A SENT count is
// the default partition's rows (at most purgeBatch) plus the planner's
// estimate of the whole partitions due ("about"); 0 may hide partitions
// never analyzed, which admin counts as 0, so it is "unknown" and the
// confirmation is still offered.
func purgeConfirm(st outbox.Status, before time.Time, n int64, action, back string) confirmData {
	verb := map[outbox.Status]string{outbox.StatusSent: "sent", outbox.StatusFailed: "failed"}[st]
	c := confirmData{Action: "purge", Verb: "Purge", N: n, URL: action, Back: back,
		What:   string(st) + " events " + verb + " before " + showTime(before),
		Fields: [][2]string{{"status", string(st)}, {"before", before.Format(time.RFC3339Nano)}}}
	switch {
	case st == outbox.StatusFailed && n >= purgeBatch:
		c.Capped = true
		c.Note = "Counting stops at " + strconv.Itoa(purgeBatch) + ", the most one confirmation purges; run the dry run again for the rest."
	case st == outbox.StatusSent:
		c.About, c.Unknown = n > 0, n == 0
		c.Note = "SENT events go by whole history partitions, those whose whole range ended before the cut-off: " +
			"their count is the planner's estimate, and a partition never analyzed has none. " +
			"One confirmation also deletes at most " + strconv.Itoa(purgeBatch) + " rows of the history's default partition; run the dry run again for the rest."
	}
	return c
}

// purgeBatch is the most rows a purge's dry run counts and its
// confirmation deletes one by one (dead letters, or rows of the SENT
// history's default partition).
const purgeBatch = admin.DefaultPurgeLimit

// parseAge reads a purge's age: a Go duration ("720h", "90m") or a
// number of days ("30d").
func parseAge(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n >= 0 && n <= 100_000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, nil
	}
	return 0, badRequestf("older than must be a duration such as 30d, 720h or 90m")
}

// confirm shows the confirmation page of a dry run.
func (h *handler) confirm(w http.ResponseWriter, r *http.Request, c confirmData) {
	c.Request = uuid.NewString()
	h.show(w, r, "confirm", h.newPage(w, r, "events", c.Verb+": confirm", c))
}

// result sends the browser to the result page (POST, then redirect,
// then GET): reloading that page shows the result again, and does not
// post the action a second time. The Location is relative to the mount
// (mountWriter adds BasePath).
func (h *handler) result(w http.ResponseWriter, r *http.Request, res resultData) {
	q := url.Values{"done": {res.Done}, "n": {strconv.FormatInt(res.N, 10)}, "back": {res.Back}}
	if res.Skipped > 0 {
		q.Set("skipped", strconv.Itoa(res.Skipped))
	}
	if res.Conflicts > 0 {
		q.Set("conflicts", strconv.Itoa(res.Conflicts))
	}
	http.Redirect(w, r, "/done?"+q.Encode(), http.StatusSeeOther)
}

// done shows what an action did, from the query result wrote; it
// changes nothing, and a made-up query shows only made-up numbers.
func (h *handler) done(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res := resultData{Done: q.Get("done"), Back: h.cfg.BasePath + "/events"}
	if res.Done != "Replayed" && res.Done != "Skipped" && res.Done != "Purged" {
		h.fail(w, r, badRequestf("done must be Replayed, Skipped or Purged"))
		return
	}
	n, err := strconv.ParseInt(q.Get("n"), 10, 64)
	if err != nil || n < 0 {
		h.fail(w, r, badRequestf("n must be a number of events"))
		return
	}
	res.N, res.Skipped, res.Conflicts = n, atoiOr0(q.Get("skipped")), atoiOr0(q.Get("conflicts"))
	if back, ok := h.localEvents(q.Get("back")); ok {
		res.Back = back
	}
	h.show(w, r, "result", h.newPage(w, r, "events", res.Done, res))
}

// alreadyDone answers a confirmation posted again (admin.ErrAlreadyDone)
// with 409 and the result page saying so.
func (h *handler) alreadyDone(w http.ResponseWriter, r *http.Request) {
	res := resultData{Done: "Already done", Already: true, Back: h.cfg.BasePath + "/events"}
	h.render(w, r, http.StatusConflict, "result", "layout.html", h.newPage(w, r, "events", res.Done, res))
}

// atoiOr0 reads a count, 0 when it is not a non-negative number.
func atoiOr0(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// localEvents returns back when it is a link to the console's event
// list or an event's page (a path under BasePath, no scheme or host).
func (h *handler) localEvents(back string) (string, bool) {
	u, err := url.Parse(back)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Fragment != "" {
		return "", false
	}
	list := h.cfg.BasePath + "/events"
	if u.Path != list && !strings.HasPrefix(u.Path, list+"/") || strings.Contains(u.Path, "//") {
		return "", false
	}
	return u.String(), true
}
