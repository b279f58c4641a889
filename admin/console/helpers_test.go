package console_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/admin/console"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// base is where the tests mount the console, as a service would.
const base = "/outbox"

// testUser is the user the tests' Authorize names.
const testUser = "ops@example"

// testBundle is one test's outbox, an Admin on it and the console served
// by an httptest server, with a browser-like client (a cookie jar).
type testBundle struct {
	db     *testdb.DB
	admin  *admin.Admin
	server *httptest.Server
	client *http.Client
}

// option changes the console's config for a test; db is the test's.
type option func(db *testdb.DB, c *console.Config)

// withActions enables actions with an Authorize that allows everyone
// as testUser.
func withActions(_ *testdb.DB, c *console.Config) {
	c.AllowActions = true
	c.Authorize = func(*http.Request) (string, bool) { return testUser, true }
}

// setup migrates a schema with the order index, and serves the console
// under base in a mux, configured by opts (read-only without them).
func setup(t *testing.T, opts ...option) *testBundle {
	t.Helper()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	cfg := console.Config{Admin: a, BasePath: base}
	for _, o := range opts {
		o(db, &cfg)
	}
	h, err := console.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(base+"/", http.StripPrefix(base, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{db: db, admin: a, server: srv, client: &http.Client{Jar: newJar(t)}}
}

// newJar returns an empty cookie jar: a fresh browser.
func newJar(t *testing.T) http.CookieJar {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return jar
}

// row is one event to insert with plain SQL (bypassing the emitter's
// checks, as a hostile or old writer could).
type row struct {
	Status    string // PENDING (default), SENT or FAILED
	Type      string // defaults to test.event
	Key       string // partition_key
	Code      string // last_error_code (and a last_error)
	Payload   []byte
	Headers   map[string]string
	CreatedAt string // an SQL expression; defaults to now()
}

// insert stores rows in order (seq follows it) and returns their ids.
func (b *testBundle) insert(t *testing.T, rows ...row) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = uuid.Must(uuid.NewV7())
		status := or(r.Status, "PENDING")
		table, seqCol, seqVal := "outbox_events", "", ""
		switch status {
		case "SENT":
			table = "outbox_events_sent"
		case "FAILED":
			table = "outbox_events_dead"
		}
		if table != "outbox_events" {
			seqCol, seqVal = "seq, ", "nextval(pg_get_serial_sequence('outbox_events', 'seq')), "
		}
		headers, err := json.Marshal(r.Headers)
		require.NoError(t, err)
		if r.Headers == nil {
			headers = []byte("{}")
		}
		log := "[]"
		if r.Code != "" {
			log = `[{"attempt": 1, "outcome": "failed", "code": "` + r.Code + `", "message": "boom", "owner": "w-1",
				"started": "2026-01-01T00:00:00Z", "ended": "2026-01-01T00:00:01Z"}]`
		}
		_, err = b.db.Pool.Exec(context.Background(), `INSERT INTO `+table+` (`+seqCol+`id, event_type, status, payload, headers,
	partition_key, last_error_code, last_error, attempt_log, attempts, sent_at, failed_at, created_at)
VALUES (`+seqVal+`$1, $2, $3, $4, $5::jsonb, nullif($6, ''), nullif($7, ''), CASE WHEN $7 <> '' THEN 'boom: ' || left($7, 100) END,
	$8::jsonb, CASE WHEN $3 = 'FAILED' THEN 1 ELSE 0 END,
	CASE WHEN $3 = 'SENT' THEN now() END, CASE WHEN $3 = 'FAILED' THEN now() END, `+or(r.CreatedAt, "now()")+`)`,
			ids[i], or(r.Type, "test.event"), status, r.Payload, string(headers), r.Key, r.Code, log)
		require.NoError(t, err)
	}
	return ids
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// many returns n copies of r.
func many(n int, r row) []row {
	rows := make([]row, n)
	for i := range rows {
		rows[i] = r
	}
	return rows
}

// status returns the status of id wherever it lives, "" when gone.
func (b *testBundle) status(t *testing.T, id uuid.UUID) string {
	t.Helper()
	s, err := testdb.StatusOf(context.Background(), b.db.Pool, b.db.Table(), id)
	require.NoError(t, err)
	return s
}

// response is a page as the tests look at it.
type response struct {
	code   int
	header http.Header
	body   string
}

// get fetches path (under base) with the bundle's client.
func (b *testBundle) get(t *testing.T, path string) response {
	t.Helper()
	return b.do(t, mustRequest(t, http.MethodGet, b.server.URL+base+path, nil))
}

// post posts form to path (under base) as a same-origin browser would.
func (b *testBundle) post(t *testing.T, path string, form url.Values) response {
	t.Helper()
	req := mustRequest(t, http.MethodPost, b.server.URL+base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", b.server.URL)
	return b.do(t, req)
}

func mustRequest(t *testing.T, method, target string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, target, body)
	require.NoError(t, err)
	return req
}

func (b *testBundle) do(t *testing.T, req *http.Request) response {
	t.Helper()
	res, err := b.client.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{code: res.StatusCode, header: res.Header, body: string(body)}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token returns the CSRF token of a page's forms.
func token(t *testing.T, page response) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page.body)
	require.NotNil(t, m, "the page has no CSRF field")
	return m[1]
}

var countN = regexp.MustCompile(`id="(?:match-count|confirm|result)"[^>]*>[^<]*(?:<[^>]+>[^<]*)*?<span class="n">(\d+)</span>`)

// number returns the number in span.n of #match-count, #confirm or
// #result.
func number(t *testing.T, page response) string {
	t.Helper()
	m := countN.FindStringSubmatch(page.body)
	require.NotNil(t, m, "no count on the page:\n%s", page.body)
	return m[1]
}

// hiddenFields returns the name/value pairs of the hidden inputs of the
// form whose button has id button (the form that ends with it).
func hiddenFields(t *testing.T, page response, button string) url.Values {
	t.Helper()
	end := strings.Index(page.body, `id="`+button+`"`)
	require.GreaterOrEqual(t, end, 0, "no button #%s", button)
	start := strings.LastIndex(page.body[:end], "<form")
	require.GreaterOrEqual(t, start, 0)
	v := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(page.body[start:end], -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)
