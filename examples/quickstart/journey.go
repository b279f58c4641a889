package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// journey prints what happens to each event and tells when all have
// settled (SENT or FAILED).
type journey struct {
	mu      sync.Mutex
	out     io.Writer
	start   time.Time
	labels  map[uuid.UUID]string
	final   map[uuid.UUID]outbox.Status
	settled chan struct{}
}

func newJourney(out io.Writer) *journey {
	return &journey{out: out, start: time.Now(), labels: map[uuid.UUID]string{},
		final: map[uuid.UUID]outbox.Status{}, settled: make(chan struct{})}
}

func (j *journey) printf(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintf(j.out, format, args...)
}

// step prints one transition of one event, with the time since start.
func (j *journey) step(id uuid.UUID, format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintf(j.out, "%6.2fs  %-26s %s\n", time.Since(j.start).Seconds(), j.labels[id], fmt.Sprintf(format, args...))
}

func (j *journey) emitted(id uuid.UUID, typ, customer string) {
	j.mu.Lock()
	j.labels[id] = fmt.Sprintf("%s (%s)", typ, customer)
	j.mu.Unlock()
	j.step(id, "PENDING      committed with its order")
}

func (j *journey) processing(e outbox.Event) {
	j.step(e.ID, "PROCESSING   attempt %d", e.Attempt)
}

// outcome is the dispatcher's OnOutcome hook: it prints each outcome as a
// step of the event's journey.
func (j *journey) outcome(_ context.Context, o dispatcher.Outcome) {
	e := o.Event
	switch o.Status {
	case outbox.StatusSent:
		j.step(e.ID, "SENT")
		j.settle(e.ID, outbox.StatusSent)
	case outbox.StatusPending:
		j.step(e.ID, "PENDING      %s: %v; retry in %s", o.Code, o.Err, time.Until(o.NextAttemptAt).Round(10*time.Millisecond))
	case outbox.StatusFailed:
		j.step(e.ID, "FAILED       %s: %v (dead letter, kept for replay)", o.Code, o.Err)
		j.settle(e.ID, outbox.StatusFailed)
	}
}

func (j *journey) settle(id uuid.UUID, s outbox.Status) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.final[id] = s
	if len(j.final) == len(j.labels) {
		close(j.settled)
	}
}

// summary prints how each event ended.
func (j *journey) summary() {
	counts := map[outbox.Status]int{}
	j.mu.Lock()
	for _, s := range j.final {
		counts[s]++
	}
	j.mu.Unlock()
	j.printf("\nAll %d events settled: %d SENT, %d FAILED.\n",
		counts[outbox.StatusSent]+counts[outbox.StatusFailed], counts[outbox.StatusSent], counts[outbox.StatusFailed])
}

// quietLogger keeps the dispatcher's own logs out of the demo's output.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
