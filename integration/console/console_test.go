package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// countCell is the overview's count of status.
func countCell(status outbox.Status) string {
	return `#counts tr[data-status="` + string(status) + `"] td.count`
}

// The overview shows the counts per status and its panels, then refreshes
// its body in place (no reload) with what changed meanwhile.
func TestOverviewShowsCountsAndRefreshes(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	seedShop(t, s)
	tb := newTab(t, operator)
	tb.open(s.root+"/", "#overview")
	for status, n := range shopCounts {
		require.Equal(t, n, tb.number(countCell(status)), "overview count of %s", status)
	}
	for _, panel := range []string{"#oldest-due", "#activity", "#failed-by-code", "#blocked-keys", "#replicas", "#by-type", "#refreshed-at"} {
		require.Equal(t, 1, tb.count(panel), "overview panel %s", panel)
	}
	require.Contains(t, tb.text("#failed-by-code"), string(outbox.CodePublishError))
	require.Contains(t, tb.text("#blocked-keys"), blockedKey)
	require.Contains(t, tb.text("#replicas"), inFlightBy)
	require.Contains(t, tb.text("#by-type"), "payment.captured")
	tb.screenshot("overview")

	eval[chromedp.Void](tb, `window.pgoutboxNotReloaded = true`)
	refreshed := tb.text("#refreshed-at")
	s.seed(t, event{Type: "order.created"})
	tb.awaitText("#refreshed-at", "the overview's refresh", func(at string) bool { return at != refreshed })
	pending := shopCounts[outbox.StatusPending] + 1
	tb.awaitText(countCell(outbox.StatusPending), "the new PENDING event in the refreshed counts",
		func(n string) bool { return strings.Map(digitsOnly, n) == strconv.FormatInt(pending, 10) })
	kept := eval[bool](tb, `window.pgoutboxNotReloaded === true`)
	require.True(t, kept, "the overview reloaded the whole page instead of swapping its body")
	require.Zero(t, tb.dialogs.Load(), "the overview opened a dialog")
}

// The list filters through its form, shows the filter's count, and leads
// to an event's detail, whose payload stays hidden until asked for.
func TestListFiltersAndOpensAnEvent(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	ids := seedShop(t, s)
	tb := newTab(t, operator)
	tb.open(s.root+"/events", "#filter")
	var all int64
	for _, n := range shopCounts {
		all += n
	}
	require.Equal(t, all, tb.number("#match-count span.n"), "the unfiltered count")
	tb.fill(`#filter [name="status"]`, string(outbox.StatusFailed))
	tb.fill(`#filter [name="code"]`, string(outbox.CodePublishError))
	tb.clickTo("#apply", "#events")
	require.EqualValues(t, len(ids.publishFailed), tb.number("#match-count span.n"))
	require.Equal(t, len(ids.publishFailed), tb.count("#events tr.event"))
	require.Equal(t, len(ids.publishFailed), tb.count("#events tr.event a.event-link"))
	rows := tb.text("#events")
	require.Contains(t, rows, "payment.captured")
	require.NotContains(t, rows, "invoice.issued")
	tb.screenshot("list")

	tb.clickTo("#events tr.event a.event-link", "#event")
	envelope := tb.text("#event")
	require.True(t, strings.Contains(envelope, ids.publishFailed[0].String()) || strings.Contains(envelope, ids.publishFailed[1].String()),
		"the detail of a listed event shows its id: %s", envelope)
	require.Contains(t, envelope, "payment.captured")
	require.Contains(t, tb.text("#headers"), "traceparent")
	log := tb.text("#attempt-log")
	require.Contains(t, log, string(outbox.CodePublishError))
	require.Contains(t, log, "broker not available")
	require.Zero(t, tb.count("pre#payload"), "the payload is shown before it was asked for")
	require.Equal(t, 1, tb.count("#replay-one"), "a FAILED event's detail offers its replay")
	tb.clickTo("#show-payload", "pre#payload")
	require.Contains(t, tb.text("pre#payload"), `"amount":`)
	tb.screenshot("event")

	tb.open(s.root+"/events?key="+url.QueryEscape(blockedKey), "#events")
	require.EqualValues(t, 2, tb.number("#match-count span.n"), "the events of key %s", blockedKey)
	require.Equal(t, 2, tb.count("#events tr.event"))
}

// A replay of everything a filter matches goes through a dry run that
// counts and changes nothing, then a confirmation that replays exactly
// those rows and writes one audit entry naming the operator.
func TestReplayWithDryRunAndConfirmation(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	ids := seedShop(t, s)
	failed := append([]uuid.UUID{ids.handlerFailed}, ids.publishFailed...)
	tb := newTab(t, operator)
	tb.open(s.root+"/events?status=FAILED&code="+string(outbox.CodePublishError), "#bulk-replay")
	require.EqualValues(t, 2, tb.number("#match-count span.n"))

	tb.clickTo("#replay-dry-run", "#confirm")
	require.EqualValues(t, 2, tb.number("#confirm span.n"), "the dry run's count")
	s.requireStatus(t, outbox.StatusFailed, failed...)
	require.Empty(t, s.audit(t), "a dry run was audited")

	tb.clickTo("#confirm-action", "#result")
	require.EqualValues(t, 2, tb.number("#result span.n"), "the replayed count")
	s.requireStatus(t, outbox.StatusPending, ids.publishFailed...)
	s.requireStatus(t, outbox.StatusFailed, ids.handlerFailed)
	entries := s.audit(t)
	require.Len(t, entries, 1)
	e := entries[0]
	require.Equal(t, operator, e.Actor)
	require.Equal(t, admin.SourceConsole, e.Source)
	require.Equal(t, admin.ActionReplay, e.Action)
	require.EqualValues(t, 2, e.Rows)
	// A filter of code (and type) alone is replayed, and audited, as
	// admin's filter replay: the entry records the filter.
	require.Equal(t, string(outbox.CodePublishError), e.Filter["code"], "the audit entry's filter: %v", e.Filter)

	tb.open(s.root+"/audit", "#audit")
	require.Equal(t, 1, tb.count("#audit tr.entry"))
	require.Contains(t, tb.text("#audit tr.entry"), operator)
}

// An event's own page replays it, and skips a dead letter that holds
// its key, each through a dry run and a confirmation, each audited.
func TestReplayOneAndSkipAHead(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	ids := seedShop(t, s)
	tb := newTab(t, operator)
	one := ids.publishFailed[0]
	tb.open(s.root+"/events/"+one.String(), "#replay-one")
	tb.clickTo("#replay-one button", "#confirm")
	require.EqualValues(t, 1, tb.number("#confirm span.n"))
	tb.clickTo("#confirm-action", "#result")
	require.EqualValues(t, 1, tb.number("#result span.n"))
	s.requireStatus(t, outbox.StatusPending, one)
	s.requireStatus(t, outbox.StatusFailed, ids.publishFailed[1], ids.handlerFailed)

	tb.open(s.root+"/", "#blocked-keys")
	require.Contains(t, tb.text("#blocked-keys"), blockedKey)
	tb.open(s.root+"/events/"+ids.handlerFailed.String(), "#skip-one")
	tb.clickTo("#skip-one button", "#confirm")
	require.EqualValues(t, 1, tb.number("#confirm span.n"))
	tb.clickTo("#confirm-action", "#result")
	require.EqualValues(t, 1, tb.number("#result span.n"))
	tb.open(s.root+"/", "#blocked-keys")
	require.NotContains(t, tb.text("#blocked-keys"), blockedKey, "the skipped head still holds its key")

	entries := s.audit(t) // newest first
	require.Len(t, entries, 2)
	require.Equal(t, admin.ActionSkip, entries[0].Action)
	require.Equal(t, admin.ActionReplay, entries[1].Action)
	for _, e := range entries {
		require.Equal(t, operator, e.Actor)
		require.EqualValues(t, 1, e.Rows)
	}
}

// A purge of the dead letters older than an age counts them in its dry
// run, then deletes exactly those, audited.
func TestPurgeWithDryRunAndConfirmation(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	ids := seedShop(t, s) // dead letters of 3 minutes and less
	old := s.seed(t, event{Status: outbox.StatusFailed, Type: "payment.captured", Code: outbox.CodePublishError, Ago: 3 * time.Hour},
		event{Status: outbox.StatusFailed, Type: "invoice.issued", Code: outbox.CodeHandlerError, Ago: 2 * time.Hour})
	young := append([]uuid.UUID{ids.handlerFailed}, ids.publishFailed...)
	tb := newTab(t, operator)
	tb.open(s.root+"/events?status=FAILED", "#bulk-purge")
	tb.fill(`#bulk-purge [name="status"]`, string(outbox.StatusFailed))
	tb.fill(`#bulk-purge [name="older_than"]`, "1h")
	tb.clickTo("#purge-dry-run", "#confirm")
	require.EqualValues(t, len(old), tb.number("#confirm span.n"), "the dry run's count")
	s.requireStatus(t, outbox.StatusFailed, append(old, young...)...)
	tb.clickTo("#confirm-action", "#result")
	require.EqualValues(t, len(old), tb.number("#result span.n"))
	s.requireStatus(t, "", old...)
	s.requireStatus(t, outbox.StatusFailed, young...)
	entries := s.audit(t)
	require.Len(t, entries, 1)
	require.Equal(t, admin.ActionPurge, entries[0].Action)
	require.EqualValues(t, len(old), entries[0].Rows)
}

// Read-only, the default: no page offers an action, and a POST made
// anyway is refused and changes nothing.
func TestReadOnlyOffersNoActionAndRefusesPosts(t *testing.T) {
	t.Parallel()
	s := serve(t, false)
	ids := seedShop(t, s)
	tb := newTab(t, "")
	for _, p := range []struct{ path, ready string }{
		{"/", "#overview"},
		{"/events?status=FAILED", "#events"},
		{"/events/" + ids.handlerFailed.String(), "#event"},
		{"/events/" + ids.handlerFailed.String() + "?payload=1", "pre#payload"},
		{"/audit", "#audit"},
	} {
		tb.open(s.root+p.path, p.ready)
		require.Zero(t, tb.count(`form[method="post" i]`), "%s offers a form that posts", p.path)
		require.Zero(t, tb.count("#bulk-replay, #bulk-purge, #replay-one, #replay-dry-run, #purge-dry-run"), "%s offers an action", p.path)
	}
	status := tb.post(s.root+"/actions/replay", map[string]string{
		"status": "FAILED", "code": string(outbox.CodePublishError), "dry": "0", "expected": "2",
	})
	require.Equal(t, int64(http.StatusForbidden), status, "a POST to a read-only console")
	s.requireStatus(t, outbox.StatusFailed, append([]uuid.UUID{ids.handlerFailed}, ids.publishFailed...)...)
	require.Empty(t, s.audit(t))
}

// The confirmation refuses a POST whose CSRF token is missing or forged,
// or that comes from another origin, and nothing is replayed.
func TestActionWithoutCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	ids := seedShop(t, s)
	tb := newTab(t, operator)
	const token = `form:has(#confirm-action) input[name="csrf"]`
	for _, tamper := range []struct{ name, js string }{
		{"missing", `document.querySelectorAll('` + token + `').forEach(e => e.remove())`},
		{"forged", `document.querySelectorAll('` + token + `').forEach(e => { e.value = 'forged' })`},
	} {
		tb.open(s.root+"/events?status=FAILED&code="+string(outbox.CodePublishError), "#bulk-replay")
		tb.clickTo("#replay-dry-run", "#confirm")
		require.Equal(t, 1, tb.count(token), "the confirmation carries its CSRF token")
		eval[chromedp.Void](tb, tamper.js)
		require.Equal(t, int64(http.StatusForbidden), tb.click("#confirm-action"), "a confirmation with its token %s", tamper.name)
		s.requireStatus(t, outbox.StatusFailed, ids.publishFailed...)
		require.Empty(t, s.audit(t))
	}

	// A page of another origin (another port: same site, so the
	// SameSite=Strict cookie goes along) posting the confirmation's own
	// fields, a valid token included, is refused too.
	tb.open(s.root+"/events?status=FAILED&code="+string(outbox.CodePublishError), "#bulk-replay")
	tb.clickTo("#replay-dry-run", "#confirm")
	fields := eval[map[string]string](tb, `Object.fromEntries(new FormData(document.querySelector("form:has(#confirm-action)")))`)
	require.NotEmpty(t, fields["csrf"])
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("<!doctype html><title>elsewhere</title><p id=elsewhere>another site</p>"))
	}))
	t.Cleanup(other.Close)
	tb.open(other.URL+"/", "#elsewhere")
	require.Equal(t, int64(http.StatusForbidden), tb.post(s.root+"/actions/replay", fields), "a confirmation posted from another origin")
	s.requireStatus(t, outbox.StatusFailed, ids.publishFailed...)
	require.Empty(t, s.audit(t))
}

// post submits a form of fields to url from the page, as a hostile page
// or a hand-made request would, and returns the response's status.
func (tb *tab) post(url string, fields map[string]string) int64 {
	tb.t.Helper()
	values, err := json.Marshal(fields)
	require.NoError(tb.t, err)
	js := `(() => {
		const f = document.createElement('form');
		f.method = 'post';
		f.action = ` + jsString(url) + `;
		for (const [name, value] of Object.entries(` + string(values) + `)) {
			const i = document.createElement('input');
			i.type = 'hidden'; i.name = name; i.value = value;
			f.appendChild(i);
		}
		document.body.appendChild(f);
		f.submit();
	})()`
	resp, err := chromedp.RunResponse(tb.ctx, chromedp.Evaluate[chromedp.Void](js))
	require.NoError(tb.t, err, "post to %s", url)
	return resp.Status
}

// requireStatus fails t unless every event of ids is in status.
func (s *site) requireStatus(t *testing.T, status outbox.Status, ids ...uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		require.Equal(t, status, s.statusOf(t, id), "event %s", id)
	}
}

// audit returns the audit log, newest first.
func (s *site) audit(t *testing.T) []admin.AuditEntry {
	t.Helper()
	page, err := s.admin.AuditLog(testctx.New(t), admin.AuditParams{Limit: 100})
	require.NoError(t, err)
	return page.Entries
}
