package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/lifecycle"
)

// running is a service while it runs.
type running struct {
	service
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned
	err    error         // run's result, once done
}

// run relays: start the services in order, wait for a stop (ctx ending,
// Stop) or for a service to end on its own, then stop the services in
// reverse order, the reader draining its batch in flight within
// DrainTimeout (or until a Stop's ctx ends). It returns the error of the
// service that ended relaying, else ErrDrainTimeout if the drain was cut,
// else nil.
func (r *Relay) run(ctx context.Context) error {
	base := context.WithoutCancel(ctx) // services outlive ctx while they drain
	unregister := r.rec.observe()
	defer unregister()
	parts := r.parts()
	ended := make(chan *running, len(parts))
	all := make([]*running, len(parts))
	for i, s := range parts {
		all[i] = launch(base, s, ended)
	}
	r.cfg.Logger.Info("pgoutbox: relay started", "table", r.cfg.Log.String(), "group", r.cfg.Group, "owner", r.cfg.Owner,
		"lanes", r.cfg.Lanes, "max_batch", r.cfg.MaxBatch, "ticker", !r.cfg.NoTicker, "retention", !r.cfg.NoRetention)

	stopCtx, cancel := r.life.UntilStop(ctx)
	defer cancel()
	var cause error
	why := ""
	select {
	case <-stopCtx.Done():
		why = r.life.StopCause(ctx)
	case s := <-ended:
		cause = r.endedOnItsOwn(s)
		why = s.name + " ended: " + cause.Error()
	}
	r.life.SetState(lifecycle.StateStopping)
	r.cfg.Logger.Info("pgoutbox: relay stopping", "table", r.cfg.Log.String(), "group", r.cfg.Group, "cause", why)
	timer := time.AfterFunc(r.cfg.DrainTimeout, r.cut)
	defer timer.Stop()
	err := r.stopAll(all)
	if r.svc.close != nil {
		r.svc.close()
	}
	r.rec.flushRepeats(true)
	r.cfg.Logger.Info("pgoutbox: relay stopped", "table", r.cfg.Log.String(), "group", r.cfg.Group, "cause", why)
	return cmp.Or(cause, err)
}

// parts are the services to run: the lag sampler (when there is
// something to sample) first, then the relay's own.
func (r *Relay) parts() []service {
	if r.svc.sample == nil {
		return r.svc.parts
	}
	every := cmp.Or(r.cfg.sampleEvery, sampleInterval)
	timeout := min(r.cfg.GroupLease/2, 30*time.Second)
	return append([]service{r.rec.sampler(r.svc.sample, every, timeout)}, r.svc.parts...)
}

// launch runs s under a context of its own, derived from base; when it
// returns before that context ends, it is sent on ended.
func launch(base context.Context, s service, ended chan<- *running) *running {
	ctx, cancel := context.WithCancel(base)
	rs := &running{service: s, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rs.done)
		rs.err = s.run(ctx)
		if ctx.Err() == nil {
			ended <- rs // buffered for every service
		}
	}()
	return rs
}

// endedOnItsOwn is the error of a service that returned before it was
// stopped, which ends relaying; a stopped group is recorded for Health
// and logged at ERROR.
func (r *Relay) endedOnItsOwn(s *running) error {
	<-s.done
	err := s.err
	if err == nil {
		err = fmt.Errorf("pgoutbox: relay: %s ended", s.name)
	}
	var stop *StopError
	if errors.As(err, &stop) {
		r.rec.groupStopped(stop)
		r.cfg.Logger.Error("pgoutbox: relay: consumer group stopped; nothing is published until an operator acts",
			"table", r.cfg.Log.String(), "group", stop.Group, "reason", stop.Reason, "error", stop.Err)
		return err
	}
	r.cfg.Logger.Error("pgoutbox: relay: a service ended", "table", r.cfg.Log.String(), "group", r.cfg.Group,
		"service", s.name, "error", err)
	return err
}

// stopAll stops the services in reverse order of their start, each
// before the next. It returns ErrDrainTimeout if a drain was cut, else
// the first error a service returned while stopping (its ctx's own
// cancellation aside).
func (r *Relay) stopAll(all []*running) error {
	var cut bool
	var first error
	for i := len(all) - 1; i >= 0; i-- {
		s := all[i]
		cut = r.stopOne(s) || cut
		var stop *StopError
		if errors.As(s.err, &stop) {
			r.rec.groupStopped(stop)
		}
		if err := s.err; err != nil && !errors.Is(err, context.Canceled) && first == nil {
			first = err
		}
	}
	if cut {
		return ErrDrainTimeout
	}
	return first
}

// stopOne stops s: a drain when it has one, cut short by hardStop, else
// its context's cancellation. It reports whether a drain was cut.
func (r *Relay) stopOne(s *running) (cut bool) {
	defer func() { s.cancel(); <-s.done }()
	if s.drain == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
	}
	s.drain()
	select {
	case <-s.done:
		return false
	case <-r.hardStop:
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}
