package report

import (
	"log/slog"
	"sync"
	"time"
)

// RepeatLogInterval is the least time between two log lines of one
// repeated error.
const RepeatLogInterval = 10 * time.Second

// logLimiter lets each distinct line through at most once per
// RepeatLogInterval, counting the repeats it held back.
type logLimiter struct {
	mu    sync.Mutex
	lines map[string]*limitedLine
}

type limitedLine struct {
	logged     time.Time // when the line was last logged
	lastSeen   time.Time // when the line last came, logged or not
	suppressed int
	held       heldLine // the line to summarise the repeats with
}

// heldLine is what a summary of held-back repeats says: their level,
// message and group attributes, and how many there were.
type heldLine struct {
	level      slog.Level
	msg        string
	args       []any
	suppressed int
}

// due returns the lines whose repeats were held back and that have not
// come for a whole RepeatLogInterval at now (with force, all lines with
// repeats held back), and forgets their count. A line that comes again
// after its summary is logged in full.
func (l *logLimiter) due(now time.Time, force bool) []heldLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dueLocked(now, force)
}

func (l *logLimiter) dueLocked(now time.Time, force bool) []heldLine {
	var out []heldLine
	for _, line := range l.lines {
		if line.suppressed > 0 && (force || now.Sub(line.lastSeen) >= RepeatLogInterval) {
			h := line.held
			h.suppressed, line.suppressed = line.suppressed, 0
			out = append(out, h)
		}
	}
	return out
}

// maxLimitedLines bounds the distinct lines the limiter remembers.
const maxLimitedLines = 1000

// evict makes room when the limiter remembers more than maxLimitedLines
// lines, never losing a count of held-back repeats: it returns the lines
// due for a summary (see due) and forgets the lines with none held back
// that were last logged an interval ago. When that is not enough, it
// returns every count held back to be summarised and forgets every line.
func (l *logLimiter) evict(now time.Time) []heldLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) <= maxLimitedLines {
		return nil
	}
	out := l.dueLocked(now, false)
	for k, line := range l.lines {
		if line.suppressed == 0 && now.Sub(line.logged) >= RepeatLogInterval {
			delete(l.lines, k)
		}
	}
	if len(l.lines) > maxLimitedLines {
		out = append(out, l.dueLocked(now, true)...)
		clear(l.lines)
	}
	return out
}

// allow reports whether the line with this key may be logged at now, and
// how many repeats were held back since it was last logged; held is what
// a summary of the repeats it holds back would say.
func (l *logLimiter) allow(key string, now time.Time, held heldLine) (suppressed int, ok bool) {
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
	if now.Sub(line.logged) < RepeatLogInterval {
		line.suppressed++
		line.held = held
		return 0, false
	}
	suppressed, line.suppressed, line.logged = line.suppressed, 0, now
	return suppressed, true
}
