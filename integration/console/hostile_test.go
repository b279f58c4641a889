package console_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// sentinel is the global a hostile string's script would set.
const sentinel = "pgoutboxPwned"

// injectedClass marks the elements a hostile string would add to a page
// that rendered it as markup.
const injectedClass = "pgoutbox-injected"

// hostile would run script, open dialogs and add elements if a page
// rendered it as HTML, in an element's text or in a quoted or unquoted
// attribute, rather than as text.
const hostile = `"'><script>window.` + sentinel + `=1;alert(1)</script>` +
	`<img class="` + injectedClass + `" src="x" onerror="window.` + sentinel + `=2;alert(2)">` +
	`<b class=` + injectedClass + ` id=` + sentinel + `>`

// huge is a 1 MiB hostile string.
var huge = strings.Repeat(hostile, 1<<20/len(hostile)+1)[:1<<20]

// Hostile event types, keys, codes, errors, owners, header names and
// values, and payloads (markup, 1 MiB, invalid UTF-8) stay text on every
// page, the overview's refreshed body and the pages of a replay of them
// included: no dialog opens, the sentinel stays unset, no element is
// injected, and the 1 MiB strings are not rendered whole.
func TestHostileStringsStayInert(t *testing.T) {
	t.Parallel()
	s := serve(t, true)
	payload := append([]byte(huge), 0xff, 0xfe, 0x80, '<', 0xc3) // not UTF-8
	hostileLog := []admin.AttemptLogEntry{{Attempt: 1, Outcome: "failed", Code: outbox.Code(hostile), Message: huge, Owner: hostile}}
	ids := s.seed(t,
		event{Status: outbox.StatusFailed, Type: hostile, Key: hostile, Code: outbox.Code(hostile), Error: hostile,
			ContentType: "text/html", Headers: map[string]string{hostile: huge, "x-note": hostile}, Payload: payload, Log: hostileLog},
		event{Type: hostile, Key: hostile, ContentType: "text/html", Headers: map[string]string{hostile: hostile}, Payload: []byte(hostile)},
		event{Status: outbox.StatusProcessing, Type: hostile, Owner: hostile, Payload: []byte{0xff, 0xfe, 0xfd}},
		event{Status: outbox.StatusSent, Type: hostile, Key: hostile, Payload: []byte(hostile)},
	)
	tb := newTab(t, operator)
	pages := []struct{ path, ready string }{
		{"/", "#overview"},
		{"/events", "#events"},
		{"/events?type=" + url.QueryEscape(hostile) + "&key=" + url.QueryEscape(hostile) + "&code=" + url.QueryEscape(hostile), "#filter"},
	}
	for _, id := range ids {
		pages = append(pages,
			struct{ path, ready string }{"/events/" + id.String(), "#event"},
			struct{ path, ready string }{"/events/" + id.String() + "?payload=1", "pre#payload"})
	}
	for _, p := range pages {
		tb.open(s.root+p.path, p.ready)
		tb.requireInert(p.path)
	}

	tb.open(s.root+"/events", "#events")
	require.Contains(t, tb.text("#events"), `"'><script>`, "the hostile type is shown as text")
	tb.open(s.root+"/events/"+ids[0].String()+"?payload=1", "pre#payload")
	length := eval[int](tb, `document.body.textContent.length`)
	require.Less(t, length, len(huge)/2, "a 1 MiB header, error or payload is rendered whole")

	tb.open(s.root+"/", "#overview")
	// Defense in depth: markup that escaped the escaping still could not
	// run, as the page's Content-Security-Policy refuses inline script.
	blocked := eval[bool](tb, `(() => {
		const s = document.createElement("script");
		s.textContent = "window.`+sentinel+` = 3";
		document.body.appendChild(s);
		return typeof window.`+sentinel+` === "undefined";
	})()`)
	require.True(t, blocked, "the Content-Security-Policy let an inline script run")
	refreshed := tb.text("#refreshed-at")
	tb.awaitText("#refreshed-at", "the overview's refresh", func(at string) bool { return at != refreshed })
	tb.requireInert("the refreshed overview")

	tb.open(s.root+"/events?status=FAILED&type="+url.QueryEscape(hostile), "#bulk-replay")
	tb.clickTo("#replay-dry-run", "#confirm")
	tb.requireInert("the confirmation of a replay of the hostile type")
	require.EqualValues(t, 1, tb.number("#confirm span.n"))
	tb.clickTo("#confirm-action", "#result")
	tb.requireInert("the result of a replay of the hostile type")
	tb.open(s.root+"/audit", "#audit")
	tb.requireInert("the audit of a replay of the hostile type")
}

// requireInert fails the test if anything hostile ran or became markup
// on the current page: a dialog opened, the sentinel is set (by a script,
// or by an injected element's id), or an injected element exists.
func (tb *tab) requireInert(page string) {
	tb.t.Helper()
	state := eval[struct {
		Set      bool `json:"set"`
		Injected int  `json:"injected"`
	}](tb, `({set: typeof window.`+sentinel+` !== "undefined", injected: document.getElementsByClassName("`+injectedClass+`").length})`)
	require.Zero(tb.t, tb.dialogs.Load(), "%s: a hostile string opened a dialog", page)
	require.False(tb.t, state.Set, "%s: a hostile string set window.%s", page, sentinel)
	require.Zero(tb.t, state.Injected, "%s: a hostile string added elements", page)
}
