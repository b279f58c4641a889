package loglimit

import (
	"log/slog"
	"sync"
	"time"
)

// Interval is the least time between two log lines of one
// repeated error.
const Interval = 10 * time.Second

// Limiter lets each distinct line through at most once per Interval,
// counting the repeats it held back. The zero Limiter is ready to use.
type Limiter struct {
	mu    sync.Mutex
	lines map[string]*limitedLine
}

// limitedLine is what the Limiter remembers of one distinct line.
type limitedLine struct {
	logged     time.Time // when the line was last logged
	lastSeen   time.Time // when the line last came, logged or not
	suppressed int
	held       Held // the line to summarise the repeats with
}

// Held is what a summary of held-back repeats says: their level,
// message and group attributes, and how many there were.
type Held struct {
	Level      slog.Level
	Msg        string
	Args       []any // the line's group attributes
	Suppressed int   // repeats held back; set by Due and Evict
}

// Due returns the lines whose repeats were held back and that have not
// come for a whole Interval at now (with force, all lines with
// repeats held back), and forgets their count. A line that comes again
// after its summary is logged in full.
func (l *Limiter) Due(now time.Time, force bool) []Held {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dueLocked(now, force)
}

func (l *Limiter) dueLocked(now time.Time, force bool) []Held {
	var out []Held
	for _, line := range l.lines {
		if line.suppressed > 0 && (force || now.Sub(line.lastSeen) >= Interval) {
			h := line.held
			h.Suppressed, line.suppressed = line.suppressed, 0
			out = append(out, h)
		}
	}
	return out
}

// MaxLines bounds the distinct lines the limiter remembers.
const MaxLines = 1000

// Evict makes room when the limiter remembers more than MaxLines
// lines, never losing a count of held-back repeats: it returns the lines
// due for a summary (see Due) and forgets the lines with none held back
// that were last logged an interval ago. When that is not enough, it
// returns every count held back to be summarised and forgets every line.
func (l *Limiter) Evict(now time.Time) []Held {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) <= MaxLines {
		return nil
	}
	out := l.dueLocked(now, false)
	for k, line := range l.lines {
		if line.suppressed == 0 && now.Sub(line.logged) >= Interval {
			delete(l.lines, k)
		}
	}
	if len(l.lines) > MaxLines {
		out = append(out, l.dueLocked(now, true)...)
		clear(l.lines)
	}
	return out
}

// Allow reports whether the line with this key may be logged at now, and
// how many repeats were held back since it was last logged; held is what
// a summary of the repeats it holds back would say.
func (l *Limiter) Allow(key string, now time.Time, held Held) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines == nil {
		l.lines = map[string]*limitedLine{}
	}
	line := l.lines[key]
	if line == nil {
		l.lines[key] = &limitedLine{logged: now, lastSeen: now}
		return 0, true
	}
	line.lastSeen = now
	if now.Sub(line.logged) < Interval {
		line.suppressed++
		line.held = held
		return 0, false
	}
	suppressed, line.suppressed, line.logged = line.suppressed, 0, now
	return suppressed, true
}
