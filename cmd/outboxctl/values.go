package main

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// knownCodes are the outbox.Code constants, in their declaration order:
// every last_error_code a dispatcher writes. TestKnownCodes keeps the list
// in step with outbox/codes.go.
var knownCodes = []outbox.Code{
	outbox.CodeHandlerError, outbox.CodePublishError, outbox.CodeTimeout, outbox.CodeNoHandler,
	outbox.CodeWorkerLost, outbox.CodeLockLost, outbox.CodePanic, outbox.CodeInvalidEvent,
	outbox.CodeSnoozeLimit, outbox.CodeOutcomeRefused,
}

// parseCode reads a -code flag in any case: "" (no filter) or one of
// knownCodes. Any other value is a usage error that lists the known codes,
// so that a typo is not taken for a filter that matches nothing.
func parseCode(v string) (outbox.Code, error) {
	c := outbox.Code(strings.ToLower(v))
	if v == "" || slices.Contains(knownCodes, c) {
		return c, nil
	}
	known := make([]string, len(knownCodes))
	for i, k := range knownCodes {
		known[i] = string(k)
	}
	return "", usagef("-code %q is not an error code; the codes are %s", v, strings.Join(known, ", "))
}

// durationFlag is a flag.Value for a required duration: it has no
// default, so -h shows none, and set says whether it was given.
type durationFlag struct {
	d   time.Duration
	set bool
}

// String returns the duration given, or "" before one is.
func (f *durationFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

// Set parses a Go duration such as 720h or 90m.
func (f *durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration (e.g. 720h, 90m, 0s)")
	}
	f.d, f.set = d, true
	return nil
}
