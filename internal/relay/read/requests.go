package read

import (
	"context"
	"slices"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// settle is the pending requests on parked keys a batch boundary carries
// out (docs/relay-design.md section 4, "Retries and parking").
type settle struct {
	// replay is the parked events of the keys replayed, in seq order:
	// published before the batch's events.
	replay []batch.Event
	// unpark is the keys replayed or skipped: unparked in memory before
	// the batch publishes, their rows deleted in its move.
	unpark []string
	// clear is the requests on keys the group has not parked: cleared
	// in the move.
	clear []string
}

func (s settle) empty() bool { return len(s.unpark) == 0 && len(s.clear) == 0 }

// outcome is the move's part of s.
func (s settle) outcome(o store.Outcome) store.Outcome {
	o.Unpark, o.Clear = s.unpark, s.clear
	return o
}

// requestsDue says whether this batch boundary reads the requests: every
// RequestsEvery batches, and when idle at most once per RequestsIdle.
func (r *Reader) requestsDue(idle bool) bool {
	if idle {
		if now := r.cfg.Clock.Mono(); now.Sub(r.idleRead) >= RequestsIdle {
			r.idleRead = now
			return true
		}
		return false
	}
	r.batches++
	if r.batches >= r.cfg.RequestsEvery {
		r.batches = 0
		return true
	}
	return false
}

// RequestsIdle is the most often an idle reader with parked keys reads
// the replay and skip requests.
const RequestsIdle = time.Second

// requests reads the group's pending requests and the parked events of
// the keys to replay, and unparks the keys replayed or skipped in parked
// (their events of the batch then publish; a replay that fails again
// parks the key anew). A failed read is reported and nothing is done:
// the next boundary reads them again.
func (r *Reader) requests(ctx context.Context, parked map[string]bool) settle {
	reqs, err := r.cfg.Store.Requests(ctx, r.cfg.Group)
	if err != nil || len(reqs) == 0 {
		r.report(ctx, err)
		return settle{}
	}
	var s settle
	var replay []string
	for _, q := range reqs {
		switch {
		case !parked[q.Key]:
			s.clear = append(s.clear, q.Key)
		case q.Skip:
			s.unpark = append(s.unpark, q.Key)
		default:
			s.unpark = append(s.unpark, q.Key)
			replay = append(replay, q.Key)
		}
	}
	if s.replay, err = r.cfg.Store.ParkedEvents(ctx, r.cfg.Group, replay); err != nil {
		r.report(ctx, err)
		return settle{}
	}
	for _, k := range s.unpark {
		delete(parked, k)
	}
	return s
}

// settleIdle carries out the pending requests when there is no batch to
// move: the replayed events publish alone and the rows go in a
// transaction fenced as a move is (store.Settle).
func (r *Reader) settleIdle(ctx context.Context, cur batch.Cursor, parked map[string]bool) error {
	if !r.requestsDue(true) {
		return nil
	}
	s := r.requests(ctx, parked)
	if s.empty() {
		return nil
	}
	var res Result
	if len(s.replay) > 0 {
		var err error
		if res, err = r.cfg.Lanes.Publish(ctx, s.replay, parked); err != nil {
			return errtext.Wrap(err, "replay parked events of %q", r.cfg.Group)
		}
	}
	err := r.cfg.Store.Settle(ctx, r.token, cur, s.outcome(store.Outcome{Parked: res.Parked, NewKeys: newKeys(res)}))
	if err != nil {
		return err // the lease is taken again, and the parked keys read again
	}
	for _, k := range res.NewKeys {
		parked[k] = true
	}
	r.settled(s, res)
	return nil
}

// settled reports a boundary's requests carried out.
func (r *Reader) settled(s settle, res Result) {
	if r.cfg.OnSettle != nil && !s.empty() {
		again := 0
		for _, k := range res.NewKeys {
			if slices.Contains(s.unpark, k) {
				again++
			}
		}
		r.cfg.OnSettle(SettleStats{Replayed: len(s.replay), Unparked: len(s.unpark) - again, Reparked: again, Cleared: len(s.clear)})
	}
}
