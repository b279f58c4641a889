package outbox

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff computes the delay before a retry. The delay after failed attempt
// n (1-based) is Initial × Multiplier^(n-1), capped at Max, then spread by
// ±Jitter of itself so that replicas do not retry in lockstep. The
// dispatcher adds the delay to the database's now(), never to the
// application clock.
//
// The zero value is [DefaultBackoff], and so is every zero field: Delay
// and Validate apply the defaults themselves, so a Backoff never needs
// WithDefaults before use.
type Backoff struct {
	// Initial is the delay after the first failed attempt. Defaults to 1s,
	// or to Max when Max is set below 1s; 1ms to 24h.
	Initial time.Duration
	// Multiplier grows the delay after each further failure. Defaults to
	// 2; 1 to 10.
	Multiplier float64
	// Max caps the delay before jitter. Defaults to 1h, or to Initial when
	// Initial is set above 1h; at least Initial, at most 7 days.
	Max time.Duration
	// Jitter is the fraction of the delay by which it is spread at random,
	// in both directions. Defaults to 0.1; at most 1. Set NoJitter instead
	// for none.
	Jitter float64
	// NoJitter turns the spread off, so every delay is exact (Jitter must
	// then be zero). Defaults to false.
	NoJitter bool
}

// DefaultBackoff is the policy a zero Backoff stands for.
var DefaultBackoff = Backoff{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 0.1}

// WithDefaults returns b with zero fields set to DefaultBackoff's, except
// that a zero Initial never exceeds a positive Max and a zero Max is never
// below Initial (Jitter stays zero when NoJitter is set).
func (b Backoff) WithDefaults() Backoff {
	if b.Initial == 0 {
		b.Initial = DefaultBackoff.Initial
		if b.Max > 0 {
			b.Initial = min(b.Initial, b.Max)
		}
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultBackoff.Multiplier
	}
	if b.Max == 0 {
		b.Max = max(DefaultBackoff.Max, b.Initial)
	}
	if b.Jitter == 0 && !b.NoJitter {
		b.Jitter = DefaultBackoff.Jitter
	}
	return b
}

// Validate returns a *ConfigError, naming the field under prefix (e.g.
// "Backoff"), for a value out of range. Zero fields stand for their
// defaults.
func (b Backoff) Validate(prefix string) error {
	if b.NoJitter && b.Jitter != 0 {
		return &ConfigError{Field: prefix + ".Jitter", Reason: "must be zero when NoJitter is set"}
	}
	b = b.WithDefaults()
	switch {
	case b.Initial < time.Millisecond || b.Initial > 24*time.Hour:
		return &ConfigError{Field: prefix + ".Initial", Reason: "must be between 1ms and 24h"}
	case b.Multiplier < 1 || b.Multiplier > 10 || math.IsNaN(b.Multiplier):
		return &ConfigError{Field: prefix + ".Multiplier", Reason: "must be between 1 and 10"}
	case b.Max < b.Initial || b.Max > 7*24*time.Hour:
		return &ConfigError{Field: prefix + ".Max", Reason: "must be between Initial and 7 days"}
	case !b.NoJitter && (b.Jitter <= 0 || b.Jitter > 1 || math.IsNaN(b.Jitter)):
		return &ConfigError{Field: prefix + ".Jitter", Reason: "must be above 0 and at most 1 (set NoJitter for none)"}
	}
	return nil
}

// Delay returns the delay after failed attempt n (1-based). n below 1 counts
// as 1. Zero fields stand for their defaults, so Backoff{}.Delay(1) is
// DefaultBackoff's first delay, about 1s.
func (b Backoff) Delay(n int) time.Duration {
	b = b.WithDefaults()
	if n < 1 {
		n = 1
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
	if d > float64(b.Max) || math.IsInf(d, 0) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		d += d * b.Jitter * (2*rand.Float64() - 1)
	}
	return time.Duration(d)
}
