package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Hostile strings in types, keys, codes, headers and payloads render
// inert: escaped by html/template, invalid UTF-8 as U+FFFD or hex, and
// 1 MiB strings cut with a visible mark. The only script element on any
// page is the console's own.
func TestHostileStringsRenderInert(t *testing.T) {
	t.Parallel()
	b := setup(t, withActions)
	const (
		script = `<script>window.pwned=1</script>`
		quotes = `"'><img src=x onerror=alert(1)>`
	)
	huge := strings.Repeat(script, (1<<20)/len(script)+1)
	invalid := []byte("\xff\xfe<script>alert(1)</script>\xc3")
	ids := b.insert(t,
		row{Type: script + quotes, Key: quotes, Headers: map[string]string{script: quotes, "big": huge}, Payload: []byte(script + quotes)},
		row{Type: huge, Payload: invalid},
		row{Status: "FAILED", Type: quotes, Key: "k", Code: "<b>code</b>", Payload: []byte(huge)},
		row{Type: "after", Key: "k"})

	pages := map[string]string{
		"overview": "/", "fragment": "/fragments/overview", "list": "/events", "failed": "/events?status=FAILED",
		"detail": "/events/" + ids[0].String() + "?payload=1", "huge": "/events/" + ids[1].String() + "?payload=1",
		"failed detail": "/events/" + ids[2].String() + "?payload=1",
	}
	for name, path := range pages {
		res := b.get(t, path)
		require.Equal(t, http.StatusOK, res.code, name)
		require.NotContains(t, res.body, "<script>", name)
		require.NotContains(t, res.body, "<img", name)
		require.NotContains(t, res.body, "<b>code", name)
		require.LessOrEqual(t, strings.Count(res.body, "<script"), 1, name) // the console's own
		require.Less(t, len(res.body), 256<<10, "%s: a 1 MiB string was not cut", name)
	}

	list := b.get(t, "/events")
	require.Contains(t, list.body, "&lt;script&gt;window.pwned=1&lt;/script&gt;&#34;&#39;&gt;&lt;img src=x onerror=alert(1)&gt;")
	require.Contains(t, list.body, "…[truncated: ")

	detail := b.get(t, pages["detail"])
	require.Contains(t, detail.body, `<th>&lt;script&gt;window.pwned=1&lt;/script&gt;</th>`)
	require.Contains(t, detail.body, `<td>&#34;&#39;&gt;&lt;img src=x onerror=alert(1)&gt;</td>`)
	require.Contains(t, detail.body, `<pre id="payload">&lt;script&gt;window.pwned=1&lt;/script&gt;&#34;&#39;&gt;&lt;img src=x onerror=alert(1)&gt;</pre>`)
	require.Contains(t, detail.body, "…[truncated: ") // the 1 MiB header value

	hexed := b.get(t, pages["huge"])
	require.Contains(t, hexed.body, "shown as hex")
	require.Contains(t, hexed.body, "ff fe 3c 73 63 72 69 70  74 3e")

	cut := b.get(t, pages["failed detail"])
	require.Contains(t, cut.body, "more bytes not shown")
	require.Contains(t, cut.body, "&lt;b&gt;code&lt;/b&gt;")
}
