package pgoutboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// watch follows one DispatchUntilIdle run: the handler calls running
// right now, and the event types this run made FAILED with no_handler.
type watch struct {
	mu        sync.Mutex
	next      int
	running   map[int]call
	noHandler map[string]int // event type → events made FAILED
}

// call is one handler call in progress.
type call struct {
	eventType string
	ctx       context.Context
}

func newWatch() *watch {
	return &watch{running: map[int]call{}, noHandler: map[string]int{}}
}

// wrap returns handlers with each call tracked while it runs.
func (w *watch) wrap(handlers map[string]outbox.Handler) map[string]outbox.Handler {
	out := make(map[string]outbox.Handler, len(handlers))
	for t, h := range handlers {
		if h == nil {
			out[t] = nil // Handle refuses it and names the type
			continue
		}
		out[t] = func(ctx context.Context, e outbox.Event) error {
			defer w.end(w.begin(ctx, t))
			return h(ctx, e)
		}
	}
	return out
}

func (w *watch) begin(ctx context.Context, eventType string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.running[w.next] = call{eventType: eventType, ctx: ctx}
	return w.next
}

func (w *watch) end(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.running, id)
}

// ignoringContext returns, sorted, the types of the handler calls still
// running although their context has ended.
func (w *watch) ignoringContext() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	types := map[string]bool{}
	for _, c := range w.running {
		if c.ctx.Err() != nil {
			types[c.eventType] = true
		}
	}
	return slices.Sorted(maps.Keys(types))
}

// onOutcome returns an OnOutcome hook that notes no_handler failures and
// then calls next, the caller's own hook, when there is one.
func (w *watch) onOutcome(next func(context.Context, dispatcher.Outcome)) func(context.Context, dispatcher.Outcome) {
	return func(ctx context.Context, o dispatcher.Outcome) {
		if o.Status == outbox.StatusFailed && o.Code == outbox.CodeNoHandler {
			w.mu.Lock()
			w.noHandler[o.Event.Type]++
			w.mu.Unlock()
		}
		if next != nil {
			next(ctx, o)
		}
	}
}

// noHandlerFailures describes the events this run made FAILED with
// no_handler and the handlers that were registered, or returns "" when
// there were none.
func (w *watch) noHandlerFailures(handlers map[string]outbox.Handler) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.noHandler) == 0 {
		return ""
	}
	n := 0
	for _, c := range w.noHandler {
		n += c
	}
	return fmt.Sprintf("%s FAILED with no_handler (types: %s): %s; check the handlers map for a typo or a missing type",
		events(n), quotedList(slices.Sorted(maps.Keys(w.noHandler))), registeredHandlers(handlers))
}

// registeredHandlers names the types of handlers, for a failure message.
func registeredHandlers(handlers map[string]outbox.Handler) string {
	if len(handlers) == 0 {
		return "no handlers are registered"
	}
	return "handlers are registered for " + quotedList(slices.Sorted(maps.Keys(handlers)))
}

// quotedList is items quoted and separated by commas.
func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
