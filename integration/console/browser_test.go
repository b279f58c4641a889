package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
)

// envChromium names the Chromium binary to drive, instead of the first of
// chromiumNames found in PATH.
const envChromium = "PGOUTBOX_CHROMIUM"

// chromiumNames are the binaries looked for in PATH, Debian's first.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// envScreenshots set to 1 makes the tests save the screenshots
// docs/console.md shows.
const envScreenshots = "PGOUTBOX_SCREENSHOTS"

// screenshotDir is where they go, from this package's directory.
var screenshotDir = filepath.Join("..", "..", "docs", "console")

// viewportWidth and viewportHeight size every tab's page, and so the
// screenshots' width.
const viewportWidth, viewportHeight = 1280, 900

// findChromium returns the Chromium binary to drive, or "" and a message
// naming what was looked for.
func findChromium() (path, missing string) {
	if p := os.Getenv(envChromium); p != "" {
		return p, "" // asked for by name: a wrong one fails, never skips
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, ""
		}
	}
	return "", fmt.Sprintf("no Chromium to drive: none of %s is in PATH and %s is unset "+
		"(install Debian's chromium: apt-get install chromium, as .ci/run does, or set %s to a Chromium binary)",
		strings.Join(chromiumNames, ", "), envChromium, envChromium)
}

// shared is the one browser the package's tests open their tabs in:
// started by the first test that needs it, stopped by TestMain after the
// last (before the goroutine leak check).
var shared struct {
	once    sync.Once
	ctx     context.Context // the browser's first tab; tabs are opened from it
	stop    func()
	missing string // no Chromium: the tests skip with it
	err     error  // Chromium would not start: the tests fail with it
}

// browser returns the shared browser's context, starting it on first
// use; it skips t when there is no Chromium and fails it when Chromium
// does not start.
func browser(t *testing.T) context.Context {
	t.Helper()
	shared.once.Do(startBrowser)
	if shared.missing != "" {
		t.Skip("browser test skipped: " + shared.missing)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.ctx
}

// startBrowser starts Chromium headless, without its sandbox as root
// (which the sandbox refuses, as in a CI container).
func startBrowser() {
	path, missing := findChromium()
	if path == "" {
		shared.missing = missing
		return
	}
	opts := slices.Concat(chromedp.DefaultExecAllocatorOptions[:], []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.WindowSize(viewportWidth, viewportHeight),
	})
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, stopBrowser := chromedp.NewContext(allocCtx)
	shared.stop = func() {
		// Closed gracefully (Chromium ends its own processes), within
		// a bound for a browser that hangs; then, whatever happened,
		// the process is gone when stopAlloc returns.
		closing, cancel := context.WithTimeout(ctx, closeWithin)
		defer cancel()
		_ = chromedp.Cancel(closing)
		stopBrowser()
		stopAlloc()
	}
	if err := chromedp.Do(ctx); err != nil {
		shared.err = fmt.Errorf("start %s (headless): %w", path, err)
		return
	}
	shared.ctx = ctx
}

// closeWithin bounds the graceful close of the browser after the tests.
const closeWithin = 30 * time.Second

// closeBrowser stops the shared browser, if a test started it.
func closeBrowser() {
	if shared.stop != nil {
		shared.stop()
	}
}

// tab is one test's page: a tab in a browser context of its own, so that
// cookies (the console's CSRF cookie) are not shared with the tabs of
// tests running beside it. Its actions end with the test or shortly
// before the run's -timeout (testctx), whichever comes first.
type tab struct {
	t       *testing.T
	ctx     context.Context
	dialogs atomic.Int64 // JavaScript dialogs the page opened
}

// newTab opens a tab that sends user (when not empty) in the
// X-Test-Operator header of every request, as a service's
// authentication would name its user.
func newTab(t *testing.T, user string) *tab {
	t.Helper()
	tb := &tab{t: t}
	tabCtx, closeTab := chromedp.NewContext(browser(t), chromedp.WithNewBrowserContext(), chromedp.WithListener(tb.onEvent))
	t.Cleanup(closeTab)
	// The tab lives as long as the context of its first Do: tabCtx.
	if err := chromedp.Do(tabCtx, chromedp.EmulateViewport(viewportWidth, viewportHeight)); err != nil {
		t.Fatalf("browser: open a tab: %v", err)
	}
	budget := testctx.New(t)
	ctx, cancel := context.WithCancelCause(tabCtx)
	unhook := context.AfterFunc(budget, func() { cancel(context.Cause(budget)) })
	t.Cleanup(func() {
		unhook()
		cancel(nil)
	})
	tb.ctx = ctx
	if user != "" {
		_, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{operatorHeader: user}})
		tb.check("send the operator's header", err)
	}
	return tb
}

// onEvent counts and dismisses JavaScript dialogs: a page of the console
// opens none, and a hostile string that ran alert() would open one. It
// runs in the tab's message loop, so it sends its command from a
// goroutine of its own.
func (tb *tab) onEvent(ev any) {
	if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
		tb.dialogs.Add(1)
		go func() {
			_, _ = chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}()
	}
}

// do runs actions in the tab, failing the test, saying what it was
// doing, if they fail.
func (tb *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	tb.check(what, chromedp.Do(tb.ctx, actions...))
}

// check fails the test, saying what it was doing, when err is not nil.
func (tb *tab) check(what string, err error) {
	tb.t.Helper()
	if err != nil {
		tb.t.Fatalf("browser: %s: %v (%v)", what, err, context.Cause(tb.ctx))
	}
}

// open loads url, requires a page answered 200 that holds the element
// sel, and waits until sel is visible.
func (tb *tab) open(url, sel string) {
	tb.t.Helper()
	resp, err := chromedp.Run(tb.ctx, chromedp.NavigateResponse(url))
	tb.arrived("open "+url, resp, err, sel)
}

// clickTo clicks the element sel, which navigates, and requires the page
// it leads to to answer 200 and hold the element next.
func (tb *tab) clickTo(sel, next string) {
	tb.t.Helper()
	tb.arrived("click "+sel, tb.clickResponse(sel), nil, next)
}

// click clicks the element sel, which navigates, and returns the status
// of the page it leads to.
func (tb *tab) click(sel string) int64 {
	tb.t.Helper()
	return tb.clickResponse(sel).Status
}

func (tb *tab) clickResponse(sel string) *network.Response {
	tb.t.Helper()
	tb.requireOne(sel)
	resp, err := chromedp.RunResponse(tb.ctx, chromedp.Click(chromedp.CSS(sel)))
	tb.check("click "+sel, err)
	return resp
}

// arrived checks where a navigation led: a page answered 200 that holds
// the element sel, which then shows. The page is loaded when the
// navigation returns, so a missing element fails at once, with what the
// page says, rather than after the run's budget.
func (tb *tab) arrived(what string, resp *network.Response, err error, sel string) {
	tb.t.Helper()
	tb.check(what, err)
	if n := tb.count(sel); resp.Status != http.StatusOK || n == 0 {
		tb.t.Fatalf("browser: %s: status %d and %d elements %s; the page reads: %.600s", what, resp.Status, n, sel, tb.text("body"))
	}
	tb.do("wait for "+sel+" to show", chromedp.WaitVisible(chromedp.CSS(sel)))
}

// fill sets the value of the form field sel.
func (tb *tab) fill(sel, value string) {
	tb.t.Helper()
	tb.requireOne(sel)
	tb.do("fill "+sel, chromedp.SetValue(chromedp.CSS(sel), value))
}

// requireOne fails the test unless the page holds the element sel.
func (tb *tab) requireOne(sel string) {
	tb.t.Helper()
	if n := tb.count(sel); n == 0 {
		tb.t.Fatalf("browser: no element %s on the page, which reads: %.600s", sel, tb.text("body"))
	}
}

// text returns the visible text of the first element sel, failing the
// test at once when there is none.
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	s, ok := tb.textNow(sel)
	if !ok {
		tb.t.Fatalf("browser: no element %s on the page", sel)
	}
	return s
}

// textNow returns the visible text of the first element sel, or false
// when there is none.
func (tb *tab) textNow(sel string) (string, bool) {
	tb.t.Helper()
	s := eval[*string](tb, fmt.Sprintf("document.querySelector(%s)?.innerText ?? null", jsString(sel)))
	if s == nil {
		return "", false
	}
	return strings.TrimSpace(*s), true
}

// number reads the digits of the first element sel as a number (the
// console may group them).
func (tb *tab) number(sel string) int64 {
	tb.t.Helper()
	s := tb.text(sel)
	n, err := strconv.ParseInt(strings.Map(digitsOnly, s), 10, 64)
	if err != nil {
		tb.t.Fatalf("browser: %s reads %q, not a number", sel, s)
	}
	return n
}

func digitsOnly(r rune) rune {
	if r >= '0' && r <= '9' {
		return r
	}
	return -1
}

// eval evaluates a JavaScript expression in tb's page (through
// DevTools, which the page's Content-Security-Policy does not govern)
// and returns its value.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	tb.check("evaluate "+expr, err)
	return v
}

// count returns how many elements match the CSS selector sel now.
func (tb *tab) count(sel string) int {
	tb.t.Helper()
	return eval[int](tb, fmt.Sprintf("document.querySelectorAll(%s).length", jsString(sel)))
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// pollEvery is how often awaitText reads the page again.
const pollEvery = 50 * time.Millisecond

// awaitText reads the text of sel until ok accepts it, and returns it. It
// waits for the page's progress (its own refresh), bounded by the test's
// budget, never by a fixed time.
func (tb *tab) awaitText(sel, what string, ok func(string) bool) string {
	tb.t.Helper()
	start := time.Now()
	for {
		s, found := tb.textNow(sel) // the element may be missing while the page swaps it
		if found && ok(s) {
			return s
		}
		select {
		case <-tb.ctx.Done():
			tb.t.Fatalf("browser: still waiting for %s after %s (%s reads %q): %v",
				what, time.Since(start).Round(time.Millisecond), sel, s, context.Cause(tb.ctx))
		case <-time.After(pollEvery):
		}
	}
}

// screenshot saves the whole page as docs/console/name.png when
// PGOUTBOX_SCREENSHOTS=1.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	if os.Getenv(envScreenshots) != "1" {
		return
	}
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	tb.check("screenshot "+name, err)
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	path := filepath.Join(screenshotDir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("saved %s", path)
}
