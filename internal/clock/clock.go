package clock

import (
	"context"
	"time"
)

// Clock tells the time and waits. The zero Clock is the wall clock.
//
// It has two readings. Now is the time of decisions: when a local lease
// deadline passes. A test replaces it (New) to freeze or step that time.
// Mono is the time of measurements and of everything else the
// dispatcher times in real time: how long a handler ran, how long a call
// has overrun, when a log line may repeat, when a peer fell silent, since
// when writes fail. It is the real time unless a test of measurements
// replaces it too (NewAll), so that a test's frozen Now does not make
// every handler look instant. Since and Until measure by Now, Elapsed by Mono; never mix a
// reading of one with a reading of the other.
type Clock struct {
	now  func() time.Time // nil: time.Now
	mono func() time.Time // nil: time.Now; set by NewAll only
}

// New returns a Clock whose Now reads now; nil gives the wall clock. Mono
// stays the real time either way: the replaced Now is the one a test of
// lease deadlines freezes or steps.
func New(now func() time.Time) Clock { return Clock{now: now} }

// NewAll returns a Clock whose every reading, Now and Mono alike, is now:
// for a test of measurements (a log limiter's window, a run time) that
// steps the time it measures by. Timers and Sleep still wait real time.
func NewAll(now func() time.Time) Clock { return Clock{now: now, mono: now} }

// Real returns the wall clock, the same as the zero Clock.
func Real() Clock { return Clock{} }

// Now returns the current time.
func (c Clock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// Mono returns the real time, for measured durations; a replaced Now
// does not move it.
func (c Clock) Mono() time.Time {
	if c.mono == nil {
		return time.Now()
	}
	return c.mono()
}

// Elapsed returns the time passed since start by Mono (start is a Mono
// reading): a measured duration.
func (c Clock) Elapsed(start time.Time) time.Duration {
	if c.mono == nil {
		return time.Since(start) // the monotonic reading alone: cheaper than a whole time.Now
	}
	return c.mono().Sub(start)
}

// Read returns Now and Mono. Unless Now is replaced they are one reading
// of the wall clock, so that a caller needing both reads it once.
func (c Clock) Read() (now, mono time.Time) {
	mono = c.Mono()
	if c.now == nil {
		return mono, mono
	}
	return c.now(), mono
}

// Since returns the time elapsed since t, by Now.
func (c Clock) Since(t time.Time) time.Duration {
	if c.now == nil {
		return time.Since(t)
	}
	return c.now().Sub(t)
}

// Until returns the duration until t, by Now.
func (c Clock) Until(t time.Time) time.Duration {
	if c.now == nil {
		return time.Until(t)
	}
	return t.Sub(c.now())
}

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
