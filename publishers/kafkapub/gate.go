package kafkapub

import (
	"context"
	"sync"
)

// gate orders the produce rounds to one topic around the lone re-produces
// to it. Any number of Publish calls produce side by side under a shared
// hold; a record re-produced alone needs the exclusive hold, so that no
// record of another call of the Publisher is buffered for the topic
// meanwhile and the record gets a batch of its own. A caller waiting for
// the exclusive hold keeps new shared holders out, so a steady stream of
// calls cannot starve it. Every wait ends when its context does. The zero
// value is open.
type gate struct {
	mu      sync.Mutex
	shared  int           // shared holds taken
	held    bool          // the exclusive hold is taken
	queued  int           // callers waiting for the exclusive hold
	changed chan struct{} // closed when the above change; nil if no one waits
}

// share takes a shared hold, or returns context.Cause(ctx) when ctx ends
// first.
func (g *gate) share(ctx context.Context) error {
	g.mu.Lock()
	for g.held || g.queued > 0 {
		if err := g.await(ctx); err != nil {
			return err
		}
	}
	g.shared++
	g.mu.Unlock()
	return nil
}

// unshare gives back a shared hold.
func (g *gate) unshare() {
	g.mu.Lock()
	g.shared--
	if g.shared == 0 {
		g.notify()
	}
	g.mu.Unlock()
}

// lock takes the exclusive hold once no shared hold is left, or returns
// context.Cause(ctx) when ctx ends first.
func (g *gate) lock(ctx context.Context) error {
	g.mu.Lock()
	g.queued++
	for g.held || g.shared > 0 {
		if err := g.await(ctx); err != nil {
			g.mu.Lock()
			g.queued--
			g.notify() // shared holders may be waiting for this caller only
			g.mu.Unlock()
			return err
		}
	}
	g.queued--
	g.held = true
	g.mu.Unlock()
	return nil
}

// unlock gives back the exclusive hold.
func (g *gate) unlock() {
	g.mu.Lock()
	g.held = false
	g.notify()
	g.mu.Unlock()
}

// await is called with g.mu held and waits for the next change. It returns
// with g.mu held, or with g.mu released and context.Cause(ctx) when ctx
// ends first.
func (g *gate) await(ctx context.Context) error {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	changed := g.changed
	g.mu.Unlock()
	select {
	case <-changed:
		g.mu.Lock()
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// notify wakes every waiter; called with g.mu held.
func (g *gate) notify() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// gates holds the gate of each topic that a Publish call is using, and
// forgets it when none is.
type gates struct {
	mu      sync.Mutex
	byTopic map[string]*topicGate
}

type topicGate struct {
	gate
	users int // callers holding or waiting for a hold; guarded by gates.mu
}

// acquire returns the gate of topic, counting the caller as a user until
// it calls release.
func (gs *gates) acquire(topic string) *topicGate {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.byTopic[topic]
	if g == nil {
		if gs.byTopic == nil {
			gs.byTopic = make(map[string]*topicGate)
		}
		g = &topicGate{}
		gs.byTopic[topic] = g
	}
	g.users++
	return g
}

func (gs *gates) release(topic string, g *topicGate) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.users--; g.users == 0 {
		delete(gs.byTopic, topic)
	}
}

// share takes a shared hold on each of topics, which must be sorted and
// unique; taking them in one order keeps two callers from waiting for each
// other. It returns the function that gives them all back, or
// context.Cause(ctx) and no holds when ctx ends first.
func (gs *gates) share(ctx context.Context, topics []string) (unshare func(), err error) {
	held := make([]*topicGate, 0, len(topics))
	unshare = func() {
		for i, g := range held {
			g.unshare()
			gs.release(topics[i], g)
		}
	}
	for _, topic := range topics {
		g := gs.acquire(topic)
		if err := g.share(ctx); err != nil {
			gs.release(topic, g)
			unshare()
			return nil, err
		}
		held = append(held, g)
	}
	return unshare, nil
}

// lock takes the exclusive hold on topic. It returns the function that
// gives it back, or context.Cause(ctx) when ctx ends first.
func (gs *gates) lock(ctx context.Context, topic string) (unlock func(), err error) {
	g := gs.acquire(topic)
	if err := g.lock(ctx); err != nil {
		gs.release(topic, g)
		return nil, err
	}
	return func() {
		g.unlock()
		gs.release(topic, g)
	}, nil
}
