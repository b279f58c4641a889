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
// right now.
type watch struct {
	mu      sync.Mutex
	next    int
	running map[int]call
}

// call is one handler call in progress.
type call struct {
	eventType string
	ctx       context.Context
}

func newWatch() *watch {
	return &watch{running: map[int]call{}}
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

// unroutable describes the events the run's dispatcher claimed and could
// not route (RouteFunc gave them no destination and no handler matched
// their types: it left them PENDING), or returns "" when there were none.
func unroutable(s dispatcher.Stats, handlers map[string]outbox.Handler) string {
	if s.Unroutable == 0 {
		return ""
	}
	return fmt.Sprintf("%s left PENDING, not routed: RouteFunc gave them no destination and no handler matched their types (%s): %s; "+
		"route them (and list them in PublishTypes, when set), or check the handlers map for a typo or a missing type",
		events(int(s.Unroutable)), quotedList(slices.Sorted(maps.Keys(s.UnroutableByType))), registeredHandlers(handlers))
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
