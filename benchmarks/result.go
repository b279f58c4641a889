package main

import (
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is one run: the JSON line the command prints.
type Result struct {
	// Case and Mode name what ran.
	Case string `json:"case"`
	Mode string `json:"mode"`
	// Params are the run's settings and counters (round trips, claims).
	Params map[string]any `json:"params"`
	// N is the number of events the run measured.
	N int `json:"n"`
	// DurationMS is the measured time; EventsPerSec is N over it.
	DurationMS   float64 `json:"duration_ms"`
	EventsPerSec float64 `json:"events_per_s"`
	// P50MS, P95MS and P99MS are latency percentiles, where measured.
	P50MS *float64 `json:"p50_ms,omitempty"`
	P95MS *float64 `json:"p95_ms,omitempty"`
	P99MS *float64 `json:"p99_ms,omitempty"`
	// Verified is true only when all N events ended as they should.
	Verified bool `json:"verified"`
	// Load1 is the 1-minute load average when the run ended.
	Load1 float64 `json:"load1"`
	// Note explains a figure that needs it.
	Note string `json:"note,omitempty"`
	// WAL is the walcost case's WAL per transition.
	WAL []walPhase `json:"wal,omitempty"`

	elapsed time.Duration
}

// throughput fills N, the duration and events/s from a count and a time.
func throughput(mode string, n int, d time.Duration) Result {
	return Result{Mode: mode, N: n, elapsed: d}
}

// finish stamps the case, the duration fields and the load average.
func (r *Result) finish(o Options) {
	r.Case = o.Case
	if r.Mode == "" {
		r.Mode = o.Mode
	}
	if r.elapsed > 0 {
		r.DurationMS = round(float64(r.elapsed.Microseconds())/1000, 1)
		r.EventsPerSec = round(float64(r.N)/r.elapsed.Seconds(), 0)
	}
	r.Load1 = loadAverage()
}

// setLatency stores p50/p95/p99 of samples (nanoseconds) in milliseconds.
func (r *Result) setLatency(samples []int64) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	p := func(q float64) *float64 {
		i := min(len(samples)-1, int(math.Ceil(q*float64(len(samples))))-1)
		v := round(float64(samples[max(i, 0)])/1e6, 2)
		return &v
	}
	r.P50MS, r.P95MS, r.P99MS = p(0.50), p(0.95), p(0.99)
}

func round(v float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(v*f) / f
}

// loadAverage is the 1-minute load average, or 0 where /proc is absent.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
