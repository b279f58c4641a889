package console

import (
	"bytes"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

//go:embed templates static
var assets embed.FS

// pageNames are the templates under templates/, each a page that fills
// the layout's "content" block (the overview's "overview" template is
// also served alone, as the fragment).
var pageNames = []string{"overview", "events", "event", "confirm", "result", "audit", "error"}

// parsePages parses the layout with each page, once per page.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(assets, "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what every template gets: the layout's fields and the page's
// own data.
type page struct {
	Title   string
	Table   string // the outbox table
	Base    string // BasePath, for links
	Nav     string // the section the page belongs to
	User    string
	Actions bool   // actions allowed: action forms are rendered
	CSRF    string // the forms' token, when Actions
	Data    any
}

// newPage fills the layout's fields for r; the CSRF cookie is set on w
// when actions are allowed and r has none.
func (h *handler) newPage(w http.ResponseWriter, r *http.Request, nav, title string, data any) page {
	p := page{Title: title, Table: h.cfg.Admin.Table().String(), Base: h.cfg.BasePath, Nav: nav, User: userOf(r), Actions: h.cfg.AllowActions, Data: data}
	if p.Actions {
		p.CSRF = h.formToken(w, r)
	}
	return p
}

// render executes a page template ("layout.html", or tmpl when it is a
// fragment) into a buffer first, so a failure gives a clean 500.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, tmpl string, p page) {
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
		h.log.ErrorContext(r.Context(), "pgoutbox console: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// show renders a full page with the layout.
func (h *handler) show(w http.ResponseWriter, r *http.Request, name string, p page) {
	h.render(w, r, http.StatusOK, name, "layout.html", p)
}

// errorData is the error page's data.
type errorData struct {
	Status  int
	Message string
}

// fail shows the error page: an input error (bad filter, bad id) as 400
// with its text, a missing row as 404, anything else as 500 with a
// generic text, logged.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "the database request failed; see the service's log"
	var nf notFound
	switch {
	case errors.Is(err, admin.ErrAlreadyDone):
		h.alreadyDone(w, r)
		return
	case errors.Is(err, outbox.ErrInvalidInput), errors.As(err, new(*badRequest)):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.As(err, &nf):
		status, msg = http.StatusNotFound, err.Error()
	default:
		h.log.ErrorContext(r.Context(), "pgoutbox console: request failed", "path", r.URL.Path, "err", err)
	}
	h.showError(w, r, status, msg)
}

// refuse answers 403 with the reason, and logs it: user is who
// Authorize named, "" when it refused.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, user, reason string) {
	h.log.WarnContext(r.Context(), "pgoutbox console: request refused", "method", r.Method, "path", clip(r.URL.Path, shortText),
		"user", clip(user, shortText), "reason", reason)
	h.showError(w, r, http.StatusForbidden, reason)
}

// showError renders the error page with status.
func (h *handler) showError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := page{Title: http.StatusText(status), Table: h.cfg.Admin.Table().String(), Base: h.cfg.BasePath, User: userOf(r),
		Data: errorData{Status: status, Message: clip(msg, longText)}}
	h.render(w, r, status, "error", "layout.html", p)
}

// badRequest is a parameter the console itself could not read.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badRequestf(format string, args ...any) error {
	return &badRequest{msg: fmt.Sprintf(format, args...)}
}

// notFound is a missing event.
type notFound struct{ msg string }

func (e notFound) Error() string { return e.msg }

// Text bounds: how much of a stored string a page shows.
const (
	shortText = 120  // in tables
	longText  = 4096 // in the detail page
	// linkedText is the longest value a link's query carries.
	linkedText = 1024
	// payloadShown is how many payload bytes the detail page shows.
	payloadShown = 4096
)

// funcs are the template functions.
var funcs = template.FuncMap{
	"short":        func(s string) string { return clip(s, shortText) },
	"long":         func(s string) string { return clip(s, longText) },
	"time":         showTime,
	"timep":        showTimePtr,
	"age":          showAge,
	"clock":        func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"window":       func(d time.Duration) string { return fmt.Sprintf("%d minutes", int(d.Minutes())) },
	"rate":         func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"sentLimit":    func() int { return admin.SentCountLimit },
	"payloadShown": func() int { return payloadShown },
	"isFailed":     func(s outbox.Status) bool { return s == outbox.StatusFailed },
}

// eventsURL is the event list's URL under base with the query of the
// key and value pairs kv; "" when a value is longer than linkedText,
// so that a page never links a huge hostile string (it shows it cut,
// without a link).
func eventsURL(base string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if len(kv[i+1]) > linkedText {
			return ""
		}
		q.Set(kv[i], kv[i+1])
	}
	return base + "/events?" + q.Encode()
}

// clip makes s safe to show: invalid UTF-8 becomes U+FFFD, and past max
// bytes it is cut (at a rune boundary) with a visible mark saying how
// much was left out. html/template escapes the result.
func clip(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" …[truncated: %d more bytes]", len(s)-cut)
}

// showTime prints t in UTC to the second, "" for the zero time.
func showTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// showTimePtr is showTime for a nullable column.
func showTimePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return showTime(*t)
}

// showAge prints a duration rounded for people: "0s", "1.5s", "3m20s".
func showAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// payloadView is the shown part of a payload: text when it is valid
// UTF-8, else a hex dump, and how many bytes were left out.
type payloadView struct {
	Text    string
	Hex     bool
	Size    int
	Omitted int
}

// viewPayload returns the first payloadShown bytes of b for display.
func viewPayload(b []byte) payloadView {
	shown := cutBytes(b, payloadShown)
	v := payloadView{Size: len(b), Omitted: len(b) - len(shown)}
	if utf8.Valid(shown) {
		v.Text = string(shown)
		return v
	}
	v.Hex, v.Text = true, hex.Dump(shown)
	return v
}

// cutBytes returns the first n bytes of b, fewer when the n-th byte
// falls inside a rune, so that text is never cut in the middle of one.
func cutBytes(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	s := b[:n]
	for i := n - 1; i >= 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRune(s[i:]) {
				return s[:i]
			}
			break
		}
	}
	return s
}
