package console

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"unicode"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Config sets up the console. Admin is required; the zero value of every
// other field is the safe choice: read-only, every reader allowed.
type Config struct {
	// Admin is the outbox the console shows and acts on. Required.
	Admin *admin.Admin
	// AllowActions enables replay, skip and purge. False (the default):
	// read-only, every action answers 403 Forbidden and no action form is
	// rendered.
	AllowActions bool
	// Authorize is called on every request, before anything is read; a
	// request it does not allow gets 403 Forbidden. user names the actor
	// in the audit log (1 to admin.MaxActorName characters): an action by
	// an allowed request with an empty user is refused. Required when AllowActions is set (New returns an
	// *outbox.ConfigError otherwise). Nil with read-only: every reader is
	// allowed, as "anonymous".
	Authorize func(r *http.Request) (user string, allowed bool)
	// BasePath is where the handler is mounted, without a trailing slash
	// (e.g. "/outbox"), used for links; empty when mounted at the root.
	// Mount it with
	//
	//	mux.Handle(BasePath+"/", http.StripPrefix(BasePath, h))
	BasePath string
	// Logger receives one Error line per request that failed on the
	// server's side and one Warn line per refused request (who, what,
	// why; never payloads). Nil: none.
	Logger *slog.Logger
	// Dispatchers are in-process dispatchers whose Health (state,
	// circuit) and ClaimedTypes the overview shows; with them, PENDING
	// types that none claims are marked unhandled. Optional.
	Dispatchers []*dispatcher.Dispatcher
	// CSRFKey is the secret the forms' CSRF tokens are derived from, at
	// least 32 bytes (keep it as secret as a session key). Set the same
	// key on every replica of a service behind a load balancer, so that a
	// form one replica rendered is accepted by another, and across
	// restarts. Nil: a random key of this handler's own (a form rendered
	// by another replica, or before a restart, is refused: reload it).
	CSRFKey []byte
}

// handler is the console: a mux of its pages behind the security checks.
type handler struct {
	cfg    Config
	mux    *http.ServeMux
	cop    *http.CrossOriginProtection
	csrf   csrfKey
	pages  map[string]*template.Template
	static http.Handler
	log    *slog.Logger
}

// New returns the console's handler for cfg. A nil Admin, AllowActions
// without Authorize, or a BasePath that is not empty or a clean path
// starting with "/" (no trailing slash) give an *outbox.ConfigError. New
// does not touch the database.
func New(cfg Config) (http.Handler, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	key := csrfKey(bytes.Clone(cfg.CSRFKey))
	if key == nil {
		if key, err = newCSRFKey(); err != nil {
			return nil, err
		}
	}
	sub, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	h := &handler{cfg: cfg, mux: http.NewServeMux(), cop: http.NewCrossOriginProtection(), csrf: key, pages: pages,
		static: http.StripPrefix("/static/", http.FileServerFS(sub)), log: cfg.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.routes()
	return h, nil
}

// validate checks cfg for New.
func validate(cfg Config) error {
	switch {
	case cfg.Admin == nil:
		return &outbox.ConfigError{Field: "Admin", Reason: "is nil"}
	case cfg.AllowActions && cfg.Authorize == nil:
		return &outbox.ConfigError{Field: "Authorize", Reason: "is required with AllowActions: every action names its user in the audit log"}
	case cfg.CSRFKey != nil && len(cfg.CSRFKey) < 32:
		return &outbox.ConfigError{Field: "CSRFKey", Reason: "must be at least 32 bytes (or nil for a random key)"}
	case cfg.BasePath != "" && !cleanBase(cfg.BasePath):
		return &outbox.ConfigError{Field: "BasePath", Reason: `must be empty or a clean absolute path such as "/outbox": ` +
			`one leading "/", no trailing slash, no "//", ".", "..", backslash, "%", query, quotes, spaces or control characters`}
	}
	return nil
}

// cleanBase reports whether p is a BasePath the console's links can
// start with and stay on the site: a clean absolute path ("/outbox"),
// never "//host" (protocol-relative) nor anything a browser or
// ServeMux would rewrite.
func cleanBase(p string) bool {
	if !strings.HasPrefix(p, "/") || p == "/" || path.Clean(p) != p || strings.Contains(p, "//") ||
		strings.ContainsAny(p, "\\?#\"'<> %") {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// routes registers the pages on h.mux; paths are relative to BasePath.
func (h *handler) routes() {
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /fragments/overview", h.overviewFragment)
	h.mux.HandleFunc("GET /events", h.events)
	h.mux.HandleFunc("GET /events/{id}", h.event)
	h.mux.HandleFunc("GET /audit", h.audit)
	h.mux.HandleFunc("GET /done", h.done)
	h.mux.HandleFunc("POST /actions/replay", h.replay)
	h.mux.HandleFunc("POST /actions/skip", h.skip)
	h.mux.HandleFunc("POST /actions/purge", h.purge)
	h.mux.Handle("GET /static/", h.static)
}

// securityHeaders are set on every response.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"Cache-Control":          "no-store",
	"X-Frame-Options":        "DENY",
}

// userKey is the request context key of the authorized user's name.
type userKey struct{}

// ServeHTTP sets the security headers, asks Authorize, and for a POST
// checks that actions are allowed, that the request is not cross-origin
// and that it carries the page's CSRF token, before the page runs.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	user := "anonymous"
	if h.cfg.Authorize != nil {
		name, ok := h.cfg.Authorize(r)
		if !ok {
			h.refuse(w, r, "", "you are not allowed to use this console")
			return
		}
		user = name
	}
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
	if r.Method == http.MethodPost {
		if err := h.checkPost(w, r, user); err != nil {
			h.refuse(w, r, user, err.Error())
			return
		}
	}
	h.mux.ServeHTTP(&mountWriter{ResponseWriter: w, base: h.cfg.BasePath}, r)
}

// mountWriter keeps redirects inside the mount: the pages and the
// ServeMux (which redirects "/static" to "/static/" and a path such as
// "/./events" to "/events") write a Location relative to the mount, and
// it puts BasePath in front, so that no redirect leaves the console.
type mountWriter struct {
	http.ResponseWriter
	base string
}

// WriteHeader prefixes a redirect's local Location with the base.
func (m *mountWriter) WriteHeader(code int) {
	if code >= 300 && code < 400 {
		if loc := m.Header().Get("Location"); strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") {
			m.Header().Set("Location", m.base+loc)
		}
	}
	m.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (m *mountWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// checkPost refuses a POST when actions are off, when it comes from
// another origin, or when its CSRF token does not match its cookie.
func (h *handler) checkPost(w http.ResponseWriter, r *http.Request, user string) error {
	if !h.cfg.AllowActions {
		return errors.New("this console is read-only: actions are not enabled")
	}
	if user == "" {
		return errors.New("the Authorize hook named no user, and every action is audited under one")
	}
	if err := h.cop.Check(r); err != nil {
		return errors.New("cross-origin request refused")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return errors.New("the form could not be read")
	}
	if !h.csrf.valid(r, user) {
		return errors.New("the form's CSRF token is missing or does not match: reload the page and try again")
	}
	return nil
}

// maxForm bounds the body of a POST.
const maxForm = 1 << 20

// userOf returns the user Authorize named for r.
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}
