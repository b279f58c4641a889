package dispatcher

import "time"

// SetClock makes the dispatcher built from c read its local clock (lease
// deadlines) from now instead of time.Now. The database clock still
// decides every due and expiry time.
func SetClock(c *Config, now func() time.Time) { c.now = now }

// HandlersTiny reports whether the dispatcher runs its handlers as tiny
// ones, a few workers per batch (see handlersTiny).
func (d *Dispatcher) HandlersTiny() bool { return d.handlersTiny() }

// SetHandlerTime sets the running average of handler durations, as if the
// handlers so far had taken avg each.
func (d *Dispatcher) SetHandlerTime(avg time.Duration) { d.handlerTime.Store(int64(avg)) }
