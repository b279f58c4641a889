package console

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// listLimit is the size of a page of the event list.
const listLimit = 50

// filter is the event list's filter as the form carries it, and the
// admin parameters it stands for.
type filter struct {
	Status, Type, Key, Code, From, To string
	params                            admin.ListParams
}

// timeLayouts are the forms a filter's from and to accept, read as UTC
// unless they carry a zone.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

// parseFilter reads the filter fields of form; a bad status or time is a
// *badRequest (the admin package checks the text fields).
func parseFilter(form url.Values) (filter, error) {
	f := filter{Status: strings.ToUpper(strings.TrimSpace(form.Get("status"))), Type: form.Get("type"), Key: form.Get("key"),
		Code: form.Get("code"), From: strings.TrimSpace(form.Get("from")), To: strings.TrimSpace(form.Get("to"))}
	st := outbox.Status(f.Status)
	if st != "" && !st.Valid() {
		return filter{}, badRequestf("status must be PENDING, PROCESSING, SENT, FAILED or empty")
	}
	from, err := parseTime("from", f.From)
	if err != nil {
		return filter{}, err
	}
	to, err := parseTime("to", f.To)
	if err != nil {
		return filter{}, err
	}
	f.params = admin.ListParams{Status: st, Type: f.Type, Key: f.Key, Code: outbox.Code(f.Code), CreatedAfter: from, CreatedBefore: to}
	return f, nil
}

// parseTime reads a from or to field: empty is no bound.
func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badRequestf("%s is not a time: use 2006-01-02T15:04:05Z (RFC 3339) or 2006-01-02 15:04 (UTC)", name)
}

// values is the filter as query or form fields, without the empty ones.
func (f filter) values() url.Values {
	v := url.Values{}
	for _, kv := range [][2]string{{"status", f.Status}, {"type", f.Type}, {"key", f.Key}, {"code", f.Code}, {"from", f.From}, {"to", f.To}} {
		if kv[1] != "" {
			v.Set(kv[0], kv[1])
		}
	}
	return v
}

// selection is the filter's non-empty fields as an audit row records
// them (admin.Actor.SelectedBy).
func (f filter) selection() map[string]any {
	out := map[string]any{}
	for _, kv := range f.Fields() {
		out[kv[0]] = kv[1]
	}
	return out
}

// Fields returns the filter's non-empty fields, in a fixed order, for
// hidden inputs.
func (f filter) Fields() [][2]string {
	v := f.values()
	out := make([][2]string, 0, len(v))
	for _, k := range []string{"status", "type", "key", "code", "from", "to"} {
		if v.Has(k) {
			out = append(out, [2]string{k, v.Get(k)})
		}
	}
	return out
}

// Empty reports whether no field is set.
func (f filter) Empty() bool { return len(f.values()) == 0 }

// Purgeable reports whether the list shows the purge form: only when no
// field but status is set, since a purge goes by status and age alone
// and would otherwise take events the list does not show.
func (f filter) Purgeable() bool {
	return f.Type == "" && f.Key == "" && f.Code == "" && f.From == "" && f.To == ""
}

// Replayable reports whether the filter can match FAILED events, the
// only ones a replay takes.
func (f filter) Replayable() bool { return f.Status == "" || f.Status == string(outbox.StatusFailed) }

// listData is the event list page's data.
type listData struct {
	Filter   filter
	Statuses []outbox.Status
	Count    admin.CountResult
	Events   []admin.Record
	Next     string // the next page's URL, "" on the last page
	First    string // the first page's URL, "" on the first page
}

// events serves the event list: the filter form, the filter's count, a
// page of events by keyset, and the bulk action forms.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p := f.params
	if p.After, err = admin.ParseCursor(r.URL.Query().Get("after")); err != nil {
		h.fail(w, r, err)
		return
	}
	p.Limit = listLimit
	ctx := r.Context()
	count, err := h.cfg.Admin.Count(ctx, f.params)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	pg, err := h.cfg.Admin.List(ctx, p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := listData{Filter: f, Statuses: outbox.Statuses(), Count: count, Events: pg.Events}
	if !pg.Next.IsZero() {
		q := f.values()
		q.Set("after", pg.Next.String())
		d.Next = h.cfg.BasePath + "/events?" + q.Encode()
	}
	if !p.After.IsZero() {
		d.First = h.cfg.BasePath + "/events"
		if q := f.values().Encode(); q != "" {
			d.First += "?" + q
		}
	}
	h.show(w, r, "events", h.newPage(w, r, "events", "Events", d))
}

// detailData is the event page's data.
type detailData struct {
	admin.Detail
	Headers     [][2]string // sorted by name
	ShowPayload bool
	Payload     payloadView
	PayloadURL  string
	KeyURL      string // the list of the events of its order key
}

// event serves one event in full; the payload only with ?payload=1.
func (h *handler) event(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, badRequestf("the event id is not a UUID"))
		return
	}
	d, err := h.cfg.Admin.Inspect(r.Context(), id)
	if errors.Is(err, admin.ErrNotFound) {
		err = notFound{msg: "no event has the id " + id.String()}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	data := detailData{Detail: d, ShowPayload: r.URL.Query().Get("payload") == "1",
		PayloadURL: h.cfg.BasePath + "/events/" + id.String() + "?payload=1#payload"}
	for k, v := range d.Headers {
		data.Headers = append(data.Headers, [2]string{k, v})
	}
	slices.SortFunc(data.Headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if data.ShowPayload {
		data.Payload = viewPayload(d.Payload)
	}
	data.Detail.Payload = nil
	if key := cmp.Or(d.PartitionKey, d.AggregateID); key != "" {
		data.KeyURL = eventsURL(h.cfg.BasePath, "key", key)
	}
	h.show(w, r, "event", h.newPage(w, r, "events", "Event "+id.String(), data))
}
