package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// mode is one -mode of a case; the first of a case's list is its default.
type mode struct {
	name string
	run  func(context.Context, Options) (Result, error)
}

// pick runs the mode o.Mode names (the first when it is empty).
func pick(ctx context.Context, o Options, modes []mode) (Result, error) {
	names := make([]string, len(modes))
	for i, m := range modes {
		if o.Mode == m.name || (o.Mode == "" && i == 0) {
			return m.run(ctx, o)
		}
		names[i] = m.name
	}
	return Result{}, fmt.Errorf("unknown mode %q (%s)", o.Mode, strings.Join(names, ", "))
}

// stopWithin calls stop with a minute's context that ctx's end does not
// cancel, so a run always stops cleanly.
func stopWithin(ctx context.Context, stop func(context.Context) error) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return stop(stopCtx)
}
