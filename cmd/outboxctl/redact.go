package main

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// mask replaces a password wherever outboxctl would print it.
const mask = "xxxxx"

// redactor writes to w with every secret replaced by mask. outboxctl
// writes whole lines with single calls, so a secret is never split
// between two writes.
type redactor struct {
	w       io.Writer
	secrets []string
}

// Write implements io.Writer; it reports len(p) on success.
func (r *redactor) Write(p []byte) (int, error) {
	out := p
	for _, s := range r.secrets {
		out = bytes.ReplaceAll(out, []byte(s), []byte(mask))
	}
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// redactErr returns err with every secret in its text masked.
func redactErr(err error, secrets []string) error {
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, mask)
		}
	}
	return errors.New(msg)
}

// urlArgs returns the values given to -url (or --url) in args, in either
// the "-url X" or the "-url=X" form.
func urlArgs(args []string) []string {
	var out []string
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "url" {
			continue
		}
		if hasValue {
			out = append(out, value)
		} else if i+1 < len(args) {
			out = append(out, args[i+1])
		}
	}
	return out
}

// dsnPassword finds password=… in a keyword/value connection string.
var dsnPassword = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// passwords returns the non-empty passwords in the connection strings,
// parsed as pgx would and, for strings pgx cannot parse, as a URL or a
// keyword/value list; every form of each one (raw and decoded) is listed.
func passwords(conns []string) []string {
	var out []string
	add := func(s string) {
		if s = strings.Trim(s, "'"); len(s) > 0 {
			out = append(out, s)
		}
	}
	for _, c := range conns {
		if c == "" {
			continue
		}
		if cfg, err := pgx.ParseConfig(c); err == nil {
			add(cfg.Password)
		}
		if u, err := url.Parse(c); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok {
				add(pw)
				add(url.PathEscape(pw))
				add(url.QueryEscape(pw))
			}
		}
		for _, m := range dsnPassword.FindAllStringSubmatch(c, -1) {
			add(m[1])
		}
		// A URL too broken for net/url: take user:password@ by hand.
		if _, rest, ok := strings.Cut(c, "://"); ok {
			if userinfo, _, ok := strings.Cut(rest, "@"); ok {
				if _, pw, ok := strings.Cut(userinfo, ":"); ok {
					add(pw)
				}
			}
		}
	}
	return out
}
