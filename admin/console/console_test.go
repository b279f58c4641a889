package console_test

import (
	"bytes"
	"context"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/admin/console"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// New refuses a config that would be unsafe or cannot work.
func TestNewChecksTheConfig(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	for name, cfg := range map[string]console.Config{
		"Admin":     {},
		"Authorize": {Admin: a, AllowActions: true},
		"BasePath":  {Admin: a, BasePath: "/outbox/"},
	} {
		_, err := console.New(cfg)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig, name)
		require.ErrorContains(t, err, name)
	}
	// A BasePath that is not a clean absolute path: links would leave the
	// site ("//evil.example" is protocol-relative) or be rewritten.
	for _, p := range []string{"//evil.example", "/", "outbox", "/a//b", "/a/./b", "/a/../b", "/a/.", "/..", `/a\b`, `\\evil`,
		"/a\x00b", "/a\tb", "/a\nb", "/a b", "/a%2fb", "/a?b", "/a#b", `/a"b`} {
		_, err := console.New(console.Config{Admin: a, BasePath: p})
		require.ErrorIs(t, err, outbox.ErrInvalidConfig, "%q", p)
		require.ErrorContains(t, err, "BasePath", "%q", p)
	}
	_, err = console.New(console.Config{Admin: a, BasePath: "/ops/outbox"})
	require.NoError(t, err)
}

// Every response carries the security headers: pages, fragments, static
// files, errors and refusals.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.insert(t, row{})[0]
	for _, path := range []string{"/", "/fragments/overview", "/events", "/events/" + id.String(), "/audit",
		"/static/console.js", "/static/console.css", "/events/not-a-uuid", "/nowhere"} {
		res := b.get(t, path)
		require.Equal(t, "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "+
			"form-action 'self'; frame-ancestors 'none'; base-uri 'none'", res.header.Get("Content-Security-Policy"), path)
		require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "no-referrer", res.header.Get("Referrer-Policy"), path)
		require.Equal(t, "no-store", res.header.Get("Cache-Control"), path)
	}
	res := b.post(t, "/actions/replay", url.Values{})
	require.Equal(t, http.StatusForbidden, res.code)
	require.Equal(t, "no-store", res.header.Get("Cache-Control"))
	require.NotEmpty(t, res.header.Get("Content-Security-Policy"))
}

// No page has an inline script or style, or an inline event handler:
// the CSP would block them, and their absence is what makes it strict.
func TestNoInlineScriptOrStyle(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	id := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	inline := regexp.MustCompile(`<script>|<script [^>]*>[^<]|<style|\sstyle=|\son[a-z]+=`)
	for _, path := range []string{"/", "/fragments/overview", "/events", "/events/" + id.String() + "?payload=1", "/audit"} {
		res := b.get(t, path)
		require.Equal(t, http.StatusOK, res.code, path)
		require.NotRegexp(t, inline, res.body, path)
	}
}

// Read-only (the default) renders no POST form anywhere and refuses
// every action with 403, changing nothing.
func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	for _, path := range []string{"/", "/events", "/events?status=FAILED", "/events/" + id.String(), "/audit"} {
		res := b.get(t, path)
		require.Equal(t, http.StatusOK, res.code, path)
		require.NotContains(t, strings.ToLower(res.body), `method="post"`, path)
		require.Contains(t, res.body, "read-only", path)
	}
	for _, path := range []string{"/fragments/overview", "/events?status=SENT", "/events?type=x", "/events/" + id.String() + "?payload=1",
		"/done?done=Purged&n=3", "/events/not-a-uuid", "/events?status=nope", "/nowhere"} {
		res := b.get(t, path)
		require.NotContains(t, strings.ToLower(res.body), `method="post"`, path)
		require.NotContains(t, strings.ToLower(res.body), `name="csrf"`, path)
	}
	for _, action := range []string{"replay", "skip", "purge"} {
		res := b.post(t, "/actions/"+action, url.Values{"id": {id.String()}, "dry": {"0"}, "expected": {"1"},
			"status": {"FAILED"}, "older_than": {"0s"}})
		require.Equal(t, http.StatusForbidden, res.code, action)
		require.Contains(t, res.body, "read-only", action)
	}
	require.Equal(t, "FAILED", b.status(t, id))
}

// An action without the CSRF token, with a wrong one, with another
// cookie's, or without the cookie, is refused and changes nothing.
func TestCSRFRefusals(t *testing.T) {
	t.Parallel()
	var log testdb.LogBuffer
	b := setup(t, withActions, func(_ *testdb.DB, c *console.Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	id := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	page := b.get(t, "/events/"+id.String())
	tok := token(t, page)
	confirm := url.Values{"id": {id.String()}, "dry": {"0"}, "expected": {"1"}}
	with := func(tok string) url.Values {
		v := url.Values{"csrf": {tok}}
		for k, vs := range confirm {
			v[k] = vs
		}
		return v
	}
	for name, form := range map[string]url.Values{
		"missing": confirm,
		"empty":   with(""),
		"wrong":   with(tok[:len(tok)-2] + "xx"),
	} {
		res := b.post(t, "/actions/replay", form)
		require.Equal(t, http.StatusForbidden, res.code, name)
		require.Contains(t, res.body, "CSRF", name)
	}
	// Another browser (another cookie) cannot use this page's token.
	other := setupClient(t, b)
	other.get(t, "/events")
	res := other.post(t, "/actions/replay", with(tok))
	require.Equal(t, http.StatusForbidden, res.code)
	// Without any cookie.
	b.client.Jar = nil
	res = b.post(t, "/actions/replay", with(tok))
	require.Equal(t, http.StatusForbidden, res.code)
	require.Equal(t, "FAILED", b.status(t, id))
	// Each refusal is logged at WARN with the user and the reason.
	require.Equal(t, 5, strings.Count(log.String(), "level=WARN msg=\"pgoutbox console: request refused\" method=POST path=/actions/replay user="+testUser), log.String())
}

// setupClient returns a bundle on the same server with a fresh cookie
// jar: another browser.
func setupClient(t *testing.T, b *testBundle) *testBundle {
	t.Helper()
	o := *b
	o.client = &http.Client{Jar: newJar(t)}
	return &o
}

// A cross-origin POST is refused even with a valid token and cookie
// (http.CrossOriginProtection).
func TestCrossOriginRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	id := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	tok := token(t, b.get(t, "/events/"+id.String()))
	form := url.Values{"csrf": {tok}, "id": {id.String()}, "dry": {"0"}, "expected": {"1"}}
	for name, headers := range map[string]map[string]string{
		"sec-fetch-site": {"Sec-Fetch-Site": "cross-site"},
		"origin":         {"Origin": "https://evil.example"},
	} {
		req := mustRequest(t, http.MethodPost, b.server.URL+base+"/actions/replay", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res := b.do(t, req)
		require.Equal(t, http.StatusForbidden, res.code, name)
		require.Contains(t, res.body, "cross-origin", name)
	}
	require.Equal(t, "FAILED", b.status(t, id))
}

// Authorize is asked on every request: a refused reader gets 403 on
// every page, a refused actor on every action.
func TestAuthorizeRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions, func(_ *testdb.DB, c *console.Config) {
		c.Authorize = func(r *http.Request) (string, bool) {
			return "mallory", r.Header.Get("X-Test-User") == "ok"
		}
	})
	id := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	for _, path := range []string{"/", "/fragments/overview", "/events", "/events/" + id.String(), "/audit", "/static/console.js",
		"/static/console.css", "/static", "/static/", "/done?done=Replayed&n=1", "/nowhere", "/./events"} {
		res := b.get(t, path)
		require.Equal(t, http.StatusForbidden, res.code, path)
		require.NotContains(t, res.body, id.String(), path)
	}
	res := b.post(t, "/actions/replay", url.Values{"id": {id.String()}, "dry": {"0"}, "expected": {"1"}})
	require.Equal(t, http.StatusForbidden, res.code)
	require.Equal(t, "FAILED", b.status(t, id))

	// An allowed request without a user name reads, but cannot act.
	nameless := setup(t, withActions, func(_ *testdb.DB, c *console.Config) {
		c.Authorize = func(*http.Request) (string, bool) { return "", true }
	})
	id = nameless.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	page := nameless.get(t, "/events/"+id.String())
	require.Equal(t, http.StatusOK, page.code)
	res = nameless.post(t, "/actions/replay", url.Values{"csrf": {token(t, page)}, "id": {id.String()}, "dry": {"1"}})
	require.Equal(t, http.StatusForbidden, res.code)
	require.Contains(t, res.body, "named no user")
}

// A bulk replay by filter: the dry run counts the FAILED events the
// filter matches and changes nothing; the confirmation replays them,
// only them, and writes one audit row naming the user.
func TestBulkReplayDryRunThenConfirm(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	hit := b.insert(t, many(3, row{Status: "FAILED", Type: "order.paid", Code: "handler_error"})...)
	miss := b.insert(t,
		row{Status: "FAILED", Type: "order.paid", Code: "timeout"},
		row{Status: "FAILED", Type: "order.shipped", Code: "handler_error"},
		row{Status: "PENDING", Type: "order.paid"})

	list := b.get(t, "/events?type=order.paid&code=handler_error")
	require.Equal(t, http.StatusOK, list.code)
	require.Equal(t, "3", number(t, list))
	require.Equal(t, 3, strings.Count(list.body, `class="event"`))
	form := hiddenFields(t, list, "replay-dry-run")
	require.Equal(t, "1", form.Get("dry"))

	dry := b.post(t, "/actions/replay", form)
	require.Equal(t, http.StatusOK, dry.code, dry.body)
	require.Contains(t, dry.body, `id="confirm"`)
	require.Equal(t, "3", number(t, dry))
	for _, id := range append(hit, miss[:2]...) {
		require.Equal(t, "FAILED", b.status(t, id), "the dry run changed %s", id)
	}
	entries, err := b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Empty(t, entries.Entries, "a dry run is not audited")

	confirm := hiddenFields(t, dry, "confirm-action")
	require.Equal(t, "0", confirm.Get("dry"))
	require.Equal(t, "3", confirm.Get("expected"))
	done := b.post(t, "/actions/replay", confirm)
	require.Equal(t, http.StatusOK, done.code, done.body)
	require.Equal(t, "3", number(t, done))
	for _, id := range hit {
		require.Equal(t, "PENDING", b.status(t, id))
	}
	for _, id := range miss[:2] {
		require.Equal(t, "FAILED", b.status(t, id))
	}

	entries, err = b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, entries.Entries, 1)
	e := entries.Entries[0]
	require.Equal(t, testUser, e.Actor)
	require.Equal(t, admin.SourceConsole, e.Source)
	require.Equal(t, admin.ActionReplay, e.Action)
	require.EqualValues(t, 3, e.Rows)
	require.Equal(t, map[string]any{"type": "order.paid", "code": "handler_error", "limit": float64(3)}, e.Filter)

	audit := b.get(t, "/audit")
	require.Equal(t, 1, strings.Count(audit.body, `class="entry"`))
	require.Contains(t, audit.body, testUser)
}

// The confirmation replays no more than it counted: events that came to
// match between the dry run and the confirmation wait for the next one.
func TestBulkReplayKeepsToTheCount(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	first := b.insert(t, many(2, row{Status: "FAILED", Code: "handler_error"})...)
	dry := b.post(t, "/actions/replay", hiddenFields(t, b.get(t, "/events?status=FAILED"), "replay-dry-run"))
	require.Equal(t, "2", number(t, dry))
	late := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	done := b.post(t, "/actions/replay", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, "2", number(t, done))
	require.Equal(t, "PENDING", b.status(t, first[0]))
	require.Equal(t, "PENDING", b.status(t, first[1]))
	require.Equal(t, "FAILED", b.status(t, late))
}

// An action answers with a redirect to its result page (reloading it
// posts nothing again), whose back link stays inside the console.
func TestResultPageAfterRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	id := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	dry := b.post(t, "/actions/replay", hiddenFields(t, b.get(t, "/events/"+id.String()), "replay-one-button"))
	b.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res := b.post(t, "/actions/replay", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, http.StatusSeeOther, res.code)
	loc, err := url.Parse(res.header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, base+"/done", loc.Path)
	b.client.CheckRedirect = nil
	for range 2 { // a reload shows the same and replays nothing
		page := b.get(t, "/done?"+loc.RawQuery)
		require.Equal(t, "1", number(t, page))
		require.Contains(t, page.body, `<a href="`+base+`/events/`+id.String()+`">Back</a>`)
	}
	entries, err := b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, entries.Entries, 1)

	for _, back := range []string{"https://evil.example/outbox/events", "//evil.example/outbox/events", "/elsewhere", "javascript:alert(1)"} {
		page := b.get(t, "/done?done=Replayed&n=1&back="+url.QueryEscape(back))
		require.Equal(t, http.StatusOK, page.code)
		require.Contains(t, page.body, `<a href="`+base+`/events">Back</a>`, back)
	}
	require.Equal(t, http.StatusBadRequest, b.get(t, "/done?done=Deleted&n=1").code)
}

// A filter that admin's replay does not take (a key, a time range) is
// replayed by the ids of the events it matches, no more than counted,
// and audited with that filter.
func TestBulkReplayByKey(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	hit := b.insert(t, many(2, row{Status: "FAILED", Key: "k1", Code: "handler_error"})...)
	miss := b.insert(t, row{Status: "FAILED", Key: "k2", Code: "handler_error"})[0]
	dry := b.post(t, "/actions/replay", hiddenFields(t, b.get(t, "/events?key=k1"), "replay-dry-run"))
	require.Equal(t, "2", number(t, dry))
	done := b.post(t, "/actions/replay", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, "2", number(t, done))
	require.Equal(t, "PENDING", b.status(t, hit[0]))
	require.Equal(t, "PENDING", b.status(t, hit[1]))
	require.Equal(t, "FAILED", b.status(t, miss))
	entries, err := b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, entries.Entries, 1)
	require.ElementsMatch(t, []any{hit[0].String(), hit[1].String()}, entries.Entries[0].Filter["ids"])
	require.Equal(t, map[string]any{"key": "k1"}, entries.Entries[0].Filter["selected_by"], "the audit row records the filter that chose the ids")
}

// One event's replay and skip from its page go through the same dry run
// and confirmation, each audited.
func TestReplayAndSkipOne(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	ids := b.insert(t, row{Status: "FAILED", Key: "k1", Code: "handler_error"}, row{Status: "FAILED", Key: "k2", Code: "handler_error"})

	page := b.get(t, "/events/"+ids[0].String())
	require.Contains(t, page.body, `id="replay-one"`)
	dry := b.post(t, "/actions/replay", hiddenFields(t, page, "replay-one-button"))
	require.Equal(t, "1", number(t, dry))
	require.Equal(t, "FAILED", b.status(t, ids[0]))
	done := b.post(t, "/actions/replay", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, "1", number(t, done))
	require.Equal(t, "PENDING", b.status(t, ids[0]))

	page = b.get(t, "/events/"+ids[1].String())
	dry = b.post(t, "/actions/skip", hiddenFields(t, page, "skip-one-button"))
	require.Equal(t, "1", number(t, dry))
	done = b.post(t, "/actions/skip", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, http.StatusOK, done.code, done.body)
	require.Equal(t, "1", number(t, done))
	var skipped bool
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		"SELECT skipped_at IS NOT NULL FROM outbox_events_dead WHERE id = $1", ids[1]).Scan(&skipped))
	require.True(t, skipped)

	entries, err := b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, entries.Entries, 2)
	require.Equal(t, admin.ActionSkip, entries.Entries[0].Action)
	require.Equal(t, admin.ActionReplay, entries.Entries[1].Action)

	// Skipping a PENDING event is refused with the reason, nothing written.
	pending := b.insert(t, row{})[0]
	tok := token(t, b.get(t, "/events"))
	res := b.post(t, "/actions/skip", url.Values{"csrf": {tok}, "id": {pending.String()}, "dry": {"0"}, "expected": {"1"},
		"request": {uuid.NewString()}})
	require.Equal(t, http.StatusBadRequest, res.code)
	require.Contains(t, res.body, "PENDING")

	// A confirmation without its single-use request id is refused: posted
	// again, it would act again.
	failed := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
	res = b.post(t, "/actions/replay", url.Values{"csrf": {tok}, "id": {failed.String()}, "dry": {"0"}, "expected": {"1"}})
	require.Equal(t, http.StatusBadRequest, res.code)
	require.Contains(t, res.body, "request id")
	require.Equal(t, "FAILED", b.status(t, failed))
}

// A purge: the dry run counts the dead letters older than the age, the
// confirmation deletes them and is audited.
func TestPurgeDryRunThenConfirm(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	ids := b.insert(t, many(4, row{Status: "FAILED", Code: "handler_error"})...)
	list := b.get(t, "/events")
	form := hiddenFields(t, list, "purge-dry-run")
	form.Set("status", "FAILED")
	form.Set("older_than", "0s")
	dry := b.post(t, "/actions/purge", form)
	require.Equal(t, http.StatusOK, dry.code, dry.body)
	require.Equal(t, "4", number(t, dry))
	require.Equal(t, "FAILED", b.status(t, ids[0]))
	done := b.post(t, "/actions/purge", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, "4", number(t, done))
	for _, id := range ids {
		require.Empty(t, b.status(t, id))
	}
	entries, err := b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, entries.Entries, 1)
	require.Equal(t, admin.ActionPurge, entries.Entries[0].Action)
	require.EqualValues(t, 4, entries.Entries[0].Rows)

	// A bad age is a 400 that names the field.
	form.Set("older_than", "soon")
	res := b.post(t, "/actions/purge", form)
	require.Equal(t, http.StatusBadRequest, res.code)
	require.Contains(t, res.body, "older than")
}

// The list pages by keyset: following #next-page visits every event
// once, in seq order, and the filter stays on every page.
func TestListPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.insert(t, many(120, row{Type: "paged"})...)
	b.insert(t, many(5, row{Type: "other"})...)
	link := regexp.MustCompile(`<a class="event-link" href="` + base + `/events/([0-9a-f-]{36})">`)
	next := regexp.MustCompile(`<a id="next-page" href="([^"]+)">`)
	var seen []uuid.UUID
	path := "/events?type=paged"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4, "too many pages")
		res := b.get(t, path)
		require.Equal(t, http.StatusOK, res.code)
		require.Equal(t, "120", number(t, res))
		for _, m := range link.FindAllStringSubmatch(res.body, -1) {
			seen = append(seen, uuid.MustParse(m[1]))
		}
		m := next.FindStringSubmatch(res.body)
		if m == nil {
			break
		}
		target := html.UnescapeString(m[1])
		require.Contains(t, target, "type=paged")
		path = strings.TrimPrefix(target, base)
	}
	require.Equal(t, ids, seen)
}

// The list filters by status, type, key, code and creation time, and
// shows each filter's count; a bad status or time is a 400.
func TestListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t,
		row{Status: "FAILED", Type: "a", Key: "k1", Code: "timeout", CreatedAt: "now() - interval '2 days'"},
		row{Status: "FAILED", Type: "a", Key: "k2", Code: "handler_error"},
		row{Status: "SENT", Type: "b", Key: "k1"},
		row{Type: "a", Key: "k1"})
	for query, want := range map[string]int{
		"":                                 4,
		"status=failed":                    2,
		"type=a":                           3,
		"key=k1":                           3,
		"code=timeout":                     1,
		"type=a&key=k1&status=FAILED":      1,
		"from=" + url.QueryEscape(ymd(-1)): 3,
		"to=" + url.QueryEscape(ymd(-1)):   1,
	} {
		res := b.get(t, "/events?"+query)
		require.Equal(t, http.StatusOK, res.code, query)
		require.Equal(t, strconv.Itoa(want), number(t, res), query)
		require.Equal(t, want, strings.Count(res.body, `class="event"`), query)
	}
	for _, query := range []string{"status=LOST", "from=yesterday", "after=x"} {
		require.Equal(t, http.StatusBadRequest, b.get(t, "/events?"+query).code, query)
	}
}

// The event page shows the envelope, headers and attempt log, hides the
// payload until asked, and answers 404 for a missing id, 400 for a bad
// one.
func TestEventDetail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.insert(t, row{Status: "FAILED", Type: "order.paid", Key: "order-7", Code: "handler_error",
		Payload: []byte(`{"secret":"s3cr3t"}`), Headers: map[string]string{"trace": "abc"}})[0]
	res := b.get(t, "/events/"+id.String())
	require.Equal(t, http.StatusOK, res.code)
	for _, want := range []string{`id="event"`, `id="headers"`, `id="attempt-log"`, `id="show-payload"`, "order.paid", "order-7", "trace", "abc",
		"handler_error", "boom", `<a id="key-events" href="/outbox/events?key=order-7">`} {
		require.Contains(t, res.body, want)
	}
	require.NotContains(t, res.body, "s3cr3t")
	require.NotContains(t, res.body, `id="payload"`)
	res = b.get(t, "/events/"+id.String()+"?payload=1")
	require.Contains(t, res.body, `<pre id="payload">{&#34;secret&#34;:&#34;s3cr3t&#34;}</pre>`)
	require.Equal(t, http.StatusNotFound, b.get(t, "/events/"+uuid.NewString()).code)
	require.Equal(t, http.StatusBadRequest, b.get(t, "/events/nope").code)
}

// The overview shows every part the browser tests look for, the counts
// by status, and its fragment is the #overview element alone.
func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, many(3, row{Type: "a"})...)
	b.insert(t, row{Status: "SENT", Type: "a"}, row{Status: "FAILED", Type: "b", Code: "handler_error", Key: "k"},
		row{Type: "c", Key: "k"})
	res := b.get(t, "/")
	require.Equal(t, http.StatusOK, res.code)
	for _, id := range []string{"overview", "counts", "oldest-due", "activity", "failed-by-code", "blocked-keys", "replicas", "by-type", "refreshed-at"} {
		require.Contains(t, res.body, `id="`+id+`"`)
	}
	for status, n := range map[string]int{"PENDING": 4, "PROCESSING": 0, "SENT": 1, "FAILED": 1} {
		require.Regexp(t, `<tr data-status="`+status+`">.*<td class="num count">`+strconv.Itoa(n)+`</td>`, res.body, status)
	}
	require.Contains(t, res.body, `src="`+base+`/static/console.js"`)
	require.Contains(t, res.body, "handler_error")

	frag := b.get(t, "/fragments/overview")
	require.Equal(t, http.StatusOK, frag.code)
	require.True(t, strings.HasPrefix(strings.TrimSpace(frag.body), `<div id="overview"`), frag.body[:min(len(frag.body), 200)])
	require.NotContains(t, frag.body, "<html")
	require.Contains(t, frag.body, `id="refreshed-at"`)
	require.Contains(t, frag.body, `id="blocked-keys"`)
}

// ymd is the date days from today (UTC) as the filter form takes it.
func ymd(days int) string {
	return time.Now().UTC().AddDate(0, 0, days).Format("2006-01-02 15:04")
}

// With in-process dispatchers, the overview shows their health and marks
// the PENDING types none of them claims.
func TestOverviewMarksUnhandledTypes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(db *testdb.DB, c *console.Config) {
		d, err := dispatcher.New(db.Pool, dispatcher.Config{Table: db.Table()})
		require.NoError(t, err)
		require.NoError(t, d.Handle("handled", func(context.Context, outbox.Event) error { return nil }))
		c.Dispatchers = []*dispatcher.Dispatcher{d}
	})
	b.insert(t, row{Type: "handled"}, row{Type: "orphan"})
	res := b.get(t, "/")
	require.Equal(t, http.StatusOK, res.code)
	require.Contains(t, res.body, `id="dispatchers"`)
	require.Regexp(t, `<tr class="unhandled"><th><a href="[^"]*">orphan</a>.*no dispatcher in this process claims it`, res.body)
	require.Regexp(t, `<th><a href="[^"]*">handled</a>.*<td class="note">(|due events wait[^<]*)</td></tr>`, res.body)
}

// The purge form goes by status and age only, so the list hides it while
// any other filter is set (a purge would take events the list does not
// show) and says why; with status alone it is there.
func TestPurgeFormHiddenWhileFiltered(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	b.insert(t, row{Status: "FAILED", Type: "foo", Code: "handler_error"})
	for _, q := range []string{"type=foo", "status=FAILED&type=foo", "key=k", "code=handler_error", "from=2026-01-01", "to=2030-01-01"} {
		res := b.get(t, "/events?"+q)
		require.Equal(t, http.StatusOK, res.code, q)
		require.NotContains(t, res.body, `id="bulk-purge"`, q)
		require.Contains(t, res.body, `id="purge-filtered"`, q)
		require.Contains(t, res.body, "Purge works by status and age only", q)
	}
	for _, q := range []string{"", "status=FAILED", "status=SENT"} {
		res := b.get(t, "/events?"+q)
		require.Contains(t, res.body, `id="bulk-purge"`, q)
		require.NotContains(t, res.body, `id="purge-filtered"`, q)
	}
}

// Redirects stay under the mount: the ServeMux's own (a path that is not
// clean, "/static" without its slash) and the pages' (an action's result)
// carry BasePath, also when the service's router does not clean paths.
func TestRedirectsKeepTheBasePath(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	h, err := console.New(console.Config{Admin: b.admin, BasePath: base})
	require.NoError(t, err)
	bare := httptest.NewServer(http.StripPrefix(base, h)) // no ServeMux in front: nothing cleans the path first
	t.Cleanup(bare.Close)
	b.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for path, want := range map[string]string{
		"/static":          base + "/static/",
		"/./events":        base + "/events",
		"/events/../audit": base + "/audit",
		"//evil.example/x": base + "/evil.example/x",
	} {
		for _, srv := range []string{b.server.URL, bare.URL} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv+base+path, nil)
			require.NoError(t, err)
			req.URL.Opaque = base + path // sent as written, dot segments and all
			res := b.do(t, req)
			if res.code == http.StatusOK { // the service's ServeMux cleaned it already
				continue
			}
			require.Contains(t, []int{http.StatusMovedPermanently, http.StatusTemporaryRedirect}, res.code, "%s%s", srv, path)
			require.Equal(t, want, strings.SplitN(res.header.Get("Location"), "?", 2)[0], "%s%s", srv, path)
		}
	}
}

// A FAILED purge's dry run counts at most a confirmation's batch: more
// dead letters than that show as "at least", not as an exact number.
func TestPurgeDryRunSaysAtLeastWhenCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	b.bulk(t, "FAILED", admin.DefaultPurgeLimit+5, "now() - interval '2 days'")
	dry := b.purgeDryRun(t, "FAILED", "1d")
	require.Equal(t, strconv.Itoa(admin.DefaultPurgeLimit), number(t, dry))
	require.Contains(t, dry.body, "(at least)")
	done := b.post(t, "/actions/purge", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, strconv.Itoa(admin.DefaultPurgeLimit), number(t, done))

	// Fewer than the batch: exact, no "at least".
	dry = b.purgeDryRun(t, "FAILED", "1d")
	require.Equal(t, "5", number(t, dry))
	require.NotContains(t, dry.body, "at least")
}

// A SENT purge's confirmation deletes no more than its dry run showed:
// the dry run counts at most a batch of the history's default partition
// plus the estimate of the whole partitions due, and the confirmation
// deletes at most that batch plus those partitions (not a "Limit" of the
// shown total, which bounds only the default partition).
func TestSentPurgeDeletesNoMoreThanShown(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	b.partition(t, 72, 2000)
	b.bulk(t, "SENT", admin.DefaultPurgeLimit+2000, "now() - interval '48 hours'") // no partition: the default one
	_, err := b.db.Pool.Exec(context.Background(), `ANALYZE outbox_events_sent`)
	require.NoError(t, err)
	dry := b.purgeDryRun(t, "SENT", "1d")
	shown, err := strconv.ParseInt(number(t, dry), 10, 64)
	require.NoError(t, err)
	total := b.sentRows(t)
	done := b.post(t, "/actions/purge", hiddenFields(t, dry, "confirm-action"))
	deleted := total - b.sentRows(t)
	require.Equal(t, strconv.FormatInt(deleted, 10), number(t, done))
	require.LessOrEqual(t, deleted, shown, "the confirmation deleted more than the page showed")
	require.EqualValues(t, admin.DefaultPurgeLimit+2000, deleted) // a batch of the default partition, the whole old partition
	require.Contains(t, dry.body, "(about)")
}

// A purge's confirmation acts on the dry run's cut-off, posted back as
// before, not on "older than" counted again from the confirmation's now:
// a partition that closed after the dry run is kept. A before later than
// now, or none, is refused.
func TestPurgeConfirmKeepsTheDryRunsCutoff(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	end := b.partition(t, 3, 100) // ended two hours ago at most
	_, err := b.db.Pool.Exec(context.Background(), `ANALYZE outbox_events_sent`)
	require.NoError(t, err)
	dry := b.purgeDryRun(t, "SENT", "1h")
	confirm := hiddenFields(t, dry, "confirm-action")
	require.NotEmpty(t, confirm.Get("before"))

	// As if the dry run had run before the partition's end.
	confirm.Set("before", end.Add(-time.Minute).UTC().Format(time.RFC3339))
	done := b.post(t, "/actions/purge", confirm)
	require.Equal(t, "0", number(t, done))
	require.EqualValues(t, 100, b.sentRows(t))

	for _, before := range []string{"", "yesterday", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)} {
		confirm.Set("before", before)
		res := b.post(t, "/actions/purge", confirm)
		require.Equal(t, http.StatusBadRequest, res.code, before)
		require.Contains(t, res.body, "before", before)
	}
	require.EqualValues(t, 100, b.sentRows(t))
}

// A SENT purge over a partition never analyzed: admin estimates it as 0
// rows, which the page shows as "unknown", not 0, still offering the
// confirmation, which purges the partition.
func TestSentPurgeUnknownEstimate(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	b.partition(t, 72, 50)
	dry := b.purgeDryRun(t, "SENT", "1d")
	require.Contains(t, dry.body, `<span class="n unknown">unknown</span>`)
	require.NotContains(t, dry.body, `<span class="n">0</span>`)
	done := b.post(t, "/actions/purge", hiddenFields(t, dry, "confirm-action"))
	require.Equal(t, "50", number(t, done))
	require.Zero(t, b.sentRows(t))
}

// A confirmation posted twice acts once: the second post changes nothing,
// writes no audit row, and answers 409 with a result page saying the
// action was done already.
func TestConfirmationPostedTwiceActsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	first := b.insert(t, many(2, row{Status: "FAILED", Code: "handler_error"})...)
	dry := b.post(t, "/actions/replay", hiddenFields(t, b.get(t, "/events?status=FAILED"), "replay-dry-run"))
	require.Equal(t, "2", number(t, dry))
	confirm := hiddenFields(t, dry, "confirm-action")
	require.NotEmpty(t, confirm.Get("request"))
	done := b.post(t, "/actions/replay", confirm)
	require.Equal(t, http.StatusOK, done.code, done.body)
	require.Equal(t, "2", number(t, done))
	require.Equal(t, "PENDING", b.status(t, first[0]))

	late := b.insert(t, many(2, row{Status: "FAILED", Code: "handler_error"})...)
	again := b.post(t, "/actions/replay", confirm)
	require.Equal(t, http.StatusConflict, again.code, again.body)
	require.Contains(t, again.body, `id="result"`)
	require.Contains(t, again.body, "Already done")
	for _, id := range late {
		require.Equal(t, "FAILED", b.status(t, id), "the second post replayed %s", id)
	}
	entries, err := b.admin.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, entries.Entries, 1)
}

// Replicas behind a load balancer share Config.CSRFKey: a confirmation
// one rendered is accepted by another. With keys of their own (the
// default), it is refused.
func TestCSRFKeySharedByReplicas(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	for _, shared := range []bool{true, false} {
		b := setup(t, withActions, func(_ *testdb.DB, c *console.Config) { c.CSRFKey = key })
		cfg := console.Config{Admin: b.admin, BasePath: base}
		withActions(b.db, &cfg)
		if shared {
			cfg.CSRFKey = key
		}
		h, err := console.New(cfg)
		require.NoError(t, err)
		mux := http.NewServeMux()
		mux.Handle(base+"/", http.StripPrefix(base, h))
		other := httptest.NewServer(mux)
		t.Cleanup(other.Close)

		failed := b.insert(t, row{Status: "FAILED", Code: "handler_error"})[0]
		dry := b.post(t, "/actions/replay", hiddenFields(t, b.get(t, "/events?status=FAILED"), "replay-dry-run"))
		form := hiddenFields(t, dry, "confirm-action")
		req := mustRequest(t, http.MethodPost, other.URL+base+"/actions/replay", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Origin", other.URL)
		res := b.do(t, req) // the same browser: its cookie goes to the other replica (cookies ignore ports)
		if shared {
			require.Equal(t, http.StatusOK, res.code, res.body)
			require.Equal(t, "PENDING", b.status(t, failed))
		} else {
			require.Equal(t, http.StatusForbidden, res.code)
			require.Equal(t, "FAILED", b.status(t, failed))
		}
	}
	_, err := console.New(console.Config{Admin: setup(t).admin, CSRFKey: key[:31]})
	require.ErrorContains(t, err, "CSRFKey")
}
