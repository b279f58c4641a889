package main

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// serveOutput is outboxctl serve's stdout: it hands over the address
// from its first line.
type serveOutput struct {
	mu   sync.Mutex
	text strings.Builder
	addr chan string
}

var servingOn = regexp.MustCompile(`on http://([^/]+)/`)

func (o *serveOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.text.Len() == 0 {
		if m := servingOn.FindSubmatch(p); m != nil {
			o.addr <- string(m[1])
		}
	}
	return o.text.Write(p)
}

// serve starts outboxctl serve with args on db and returns its base URL;
// the server stops, and must exit 0, when the test ends.
func serve(t *testing.T, db *testdb.DB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(testctx.New(t))
	out := &serveOutput{addr: make(chan string, 1)}
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "-url", db.URL, "-schema", db.Schema, "-listen", "127.0.0.1:0"}, args...), out, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, exitOK, <-done, stderr.String())
	})
	select {
	case addr := <-out.addr:
		return "http://" + addr
	case code := <-done:
		done <- code
		t.Fatalf("outboxctl serve exited %d: %s", code, stderr.String())
	}
	return ""
}

// fetch sends a request with client and returns its status and body.
func fetch(t *testing.T, client *http.Client, req *http.Request) (int, string) {
	t.Helper()
	res, err := client.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// Read-only by default: the console answers without a token on the
// loopback address, shows no action form and refuses a POST; without a
// token it answers only requests addressed to an IP address or
// localhost.
func TestServeReadOnly(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "FAILED", "a", 2)
	base := serve(t, db)
	code, body := fetch(t, http.DefaultClient, mustReq(t, http.MethodGet, base+"/events?status=FAILED", nil))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "read-only")
	require.Equal(t, 2, strings.Count(body, `class="event"`))
	require.NotContains(t, body, `method="post"`)
	code, _ = fetch(t, http.DefaultClient, mustReq(t, http.MethodPost, base+"/actions/replay", nil))
	require.Equal(t, http.StatusForbidden, code)

	// A request addressed by another name (DNS rebinding) is refused.
	req := mustReq(t, http.MethodGet, base+"/", nil)
	req.Host = "attacker.example:8080"
	code, body = fetch(t, http.DefaultClient, req)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "DNS rebinding")
	req = mustReq(t, http.MethodGet, base+"/", nil)
	req.Host = "localhost"
	code, _ = fetch(t, http.DefaultClient, req)
	require.Equal(t, http.StatusOK, code)
}

// With -allow-actions and -token-file, every request needs the token
// (401 with a basic-auth challenge without it); with it, a replay by
// filter runs through its dry run and confirmation and is audited with
// the -user name (Bearer) or the basic-auth user name.
func TestServeWithActions(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ids := insert(t, db, "FAILED", "a", 2)
	tokenFile := filepath.Join(t.TempDir(), "token")
	const tok = "s3cret-token-of-the-console"
	require.NoError(t, os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600))
	base := serve(t, db, "-allow-actions", "-token-file", tokenFile, "-user", "ana")

	for name, set := range map[string]func(*http.Request){
		"none":         func(*http.Request) {},
		"wrong bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") },
		"wrong basic":  func(r *http.Request) { r.SetBasicAuth("bob", "nope") },
	} {
		req := mustReq(t, http.MethodGet, base+"/", nil)
		set(req)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, name)
		require.Contains(t, res.Header.Get("WWW-Authenticate"), "Basic", name)
	}

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}
	bearer := func(r *http.Request) *http.Request {
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	code, body := fetch(t, client, bearer(mustReq(t, http.MethodGet, base+"/events?status=FAILED", nil)))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "actions enabled")
	code, body = fetch(t, client, bearer(postForm(t, base+"/actions/replay", formOf(t, body, "replay-dry-run"))))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<span class="n">2</span>`)
	code, body = fetch(t, client, bearer(postForm(t, base+"/actions/replay", formOf(t, body, "confirm-action"))))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="result"`)
	require.Equal(t, 2, count(t, db, "PENDING"), ids)

	basic := mustReq(t, http.MethodGet, base+"/audit", nil)
	basic.SetBasicAuth("bob", tok)
	code, body = fetch(t, client, basic)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "bob")

	a, err := admin.New(db.Pool, admin.Config{Table: db.Table()})
	require.NoError(t, err)
	page, err := a.AuditLog(context.Background(), admin.AuditParams{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "ana", page.Entries[0].Actor)
	require.Equal(t, admin.SourceConsole, page.Entries[0].Source)
}

// Actions need a token file, and the token must be long enough.
func TestServeUsage(t *testing.T) {
	t.Parallel()
	r := ctl(t, "serve", "-url", "postgres://x@127.0.0.1:1/db", "-allow-actions")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "-allow-actions requires -token-file")
	short := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(short, []byte("short"), 0o600))
	r = ctl(t, "serve", "-url", "postgres://x@127.0.0.1:1/db", "-token-file", short)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "at least 16 characters")
}

func mustReq(t *testing.T, method, target string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, target, body)
	require.NoError(t, err)
	return req
}

// postForm is a same-origin form POST.
func postForm(t *testing.T, target string, form url.Values) *http.Request {
	t.Helper()
	req := mustReq(t, http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return req
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)

// formOf returns the hidden fields of the form that ends with the
// button whose id is button.
func formOf(t *testing.T, body, button string) url.Values {
	t.Helper()
	end := strings.Index(body, `id="`+button+`"`)
	require.GreaterOrEqual(t, end, 0, "no #%s in:\n%s", button, body)
	start := strings.LastIndex(body[:end], "<form")
	v := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(body[start:end], -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v
}
