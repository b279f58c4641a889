package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// csrfCookie is the cookie that carries the double-submit secret.
const csrfCookie = "pgoutbox_console_csrf"

// csrfKey is the handler's random HMAC key: a form's token is the HMAC
// of the browser's cookie and the user, so a token is worth nothing
// without the key, another user's session, or after a restart.
type csrfKey []byte

// newCSRFKey draws a fresh key.
func newCSRFKey() (csrfKey, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return key, nil
}

// token returns the form token for a cookie value and user.
func (k csrfKey) token(cookie, user string) string {
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(cookie))
	mac.Write([]byte{0})
	mac.Write([]byte(user))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// valid reports whether r's form field "csrf" is the token of r's
// cookie and user.
func (k csrfKey) valid(r *http.Request, user string) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || !wellFormed(c.Value) {
		return false
	}
	got := r.PostForm.Get("csrf")
	return hmac.Equal([]byte(got), []byte(k.token(c.Value, user)))
}

// wellFormed reports whether v looks like a cookie value newCookie made.
func wellFormed(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 32
}

// formToken returns the token for the page's forms, setting a fresh
// cookie on w when r carries none (or a malformed one).
func (h *handler) formToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && wellFormed(c.Value) {
		return h.csrf.token(c.Value, userOf(r))
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	v := base64.RawURLEncoding.EncodeToString(raw)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: h.cfg.BasePath + "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return h.csrf.token(v, userOf(r))
}
