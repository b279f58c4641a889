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
