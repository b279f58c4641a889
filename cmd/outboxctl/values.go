package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
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

// durationFlag is a flag.Value for a required duration of at least min:
// it has no default, so -h shows none, and set says whether it was given.
type durationFlag struct {
	d, min time.Duration
	set    bool
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

func (f *durationFlag) checkRange(name string) error {
	if !f.set {
		return nil
	}
	return checkMin(name, f.d, f.min)
}

// rangeChecker is a flag value with a documented range: run checks every
// flag that is one after parsing, before a command connects, so that a
// value out of range never reaches a statement (a -limit of 0 would be
// read by package admin as its default).
type rangeChecker interface {
	// checkRange returns a usage error naming the flag when its value is
	// out of range.
	checkRange(name string) error
}

// checkRanges checks every flag of fs that has a range, in name order.
func checkRanges(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if c, ok := f.Value.(rangeChecker); ok && err == nil {
			err = c.checkRange(f.Name)
		}
	})
	return err
}

// intRange is an int flag that must lie in [min, max].
type intRange struct {
	n, min, max int
}

// intRangeFlag defines an int flag with default def that must lie in
// [min, max]; its usage text ends with the range.
func intRangeFlag(fs *flag.FlagSet, name string, def, min, max int, usage string) *int {
	f := &intRange{n: def, min: min, max: max}
	fs.Var(f, name, fmt.Sprintf("%s, %d to %d", usage, min, max))
	return &f.n
}

// String returns the value.
func (f *intRange) String() string {
	if f == nil {
		return ""
	}
	return strconv.Itoa(f.n)
}

// Set parses a decimal integer; the range is checked by checkRange.
func (f *intRange) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return errors.New("not an integer")
	}
	f.n = n
	return nil
}

func (f *intRange) checkRange(name string) error {
	if f.n < f.min || f.n > f.max {
		return usagef("-%s must be %d–%d, got %d", name, f.min, f.max, f.n)
	}
	return nil
}

// minDuration is a duration flag that must be at least min.
type minDuration struct {
	d, min time.Duration
}

// minDurationFlag defines a duration flag with default def that must be
// at least min.
func minDurationFlag(fs *flag.FlagSet, name string, def, min time.Duration, usage string) *time.Duration {
	f := &minDuration{d: def, min: min}
	fs.Var(f, name, usage)
	return &f.d
}

// String returns the value.
func (f *minDuration) String() string {
	if f == nil {
		return ""
	}
	return f.d.String()
}

// Set parses a Go duration such as 2s or 1m.
func (f *minDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration (e.g. 2s, 1m)")
	}
	f.d = d
	return nil
}

func (f *minDuration) checkRange(name string) error {
	return checkMin(name, f.d, f.min)
}

// checkMin is the usage error of a duration flag below its minimum.
func checkMin(name string, d, min time.Duration) error {
	if d < min {
		return usagef("-%s must be at least %s, got %s", name, min, d)
	}
	return nil
}
