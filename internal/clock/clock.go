package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits. The zero Clock is the wall clock.
type Clock struct {
	now func() time.Time // nil: time.Now
}

// New returns a Clock that reads the time from now; nil gives the wall
// clock.
func New(now func() time.Time) Clock { return Clock{now: now} }

// Real returns the wall clock, the same as the zero Clock.
func Real() Clock { return Clock{} }

// Now returns the current time.
func (c Clock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// Since returns the time elapsed since t, by Now.
func (c Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the duration until t, by Now.
func (c Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// NewTimer returns a timer that fires once d has passed in real time.
func (c Clock) NewTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }

// NewTicker returns a ticker that ticks every d in real time.
func (c Clock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// AfterFunc calls f on its own goroutine once d has passed in real time;
// the returned timer stops or resets it.
func (c Clock) AfterFunc(d time.Duration, f func()) *time.Timer { return time.AfterFunc(d, f) }

// Sleep waits d, or until ctx ends, in which case it returns ctx's cause.
func (c Clock) Sleep(ctx context.Context, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Serve is the loop of a background writer (the completer, the start
// marker): until quit ends, it runs once on each signal, and again when
// the wait once returned (0: none) has passed.
func (c Clock) Serve(quit context.Context, signal <-chan struct{}, once func() (wait time.Duration)) {
	retry := c.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-quit.Done():
			return
		case <-signal:
		case <-retry.C:
		}
		if wait := once(); wait > 0 {
			retry.Reset(wait)
		}
	}
}
