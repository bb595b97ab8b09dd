package dispatch

import (
	"context"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Sending directly. A user with no queue for an endpoint (nothing waiting,
// nothing held: a release deletes the queue) is sent the batch's events
// by Apply itself, in version order, before the stream's checkpoint
// moves: the events are in the stream until then, so the stream is the
// queue, and nothing is written per event but its row, with the batch's
// other rows (Store.PutRows: one call 25 rows, no transaction). One read of the
// batch's queues (Store.ReadQueues: one call a hundred users) says who
// has none. An attempt without a 2xx parks the user behind it: the mark
// makes the queue (done just before the event), claimed, and the failed
// attempt is written on its row and the queue, put off to the next
// attempt, as a queue's head is (deliver.go); the rest of the user's
// events wait in the queue. A dispatcher that dies before the checkpoint
// leaves the batch to be read again: its events are sent again, under the
// same webhook-ids, in version order (at least once).
//
// An endpoint whose direct attempt failed or took longer than directSlow
// gets its events through queues for directPause, so that one slow or
// failing receiver does not hold the stream (and with it the projection
// that shares it) at each batch: a batch waits for its slowest direct
// attempt, bounded by the Sender's timeout.
const (
	directSlow  = time.Second
	directPause = 30 * time.Second
)

// route splits the batch's marks into those sent directly (no queue, the
// endpoint not paused) and those marked on their queue.
func (d *Dispatcher) route(ctx context.Context, marks []mark) (direct, queued []mark, err error) {
	now := d.o.Now()
	var candidates []mark
	d.mu.Lock()
	for _, m := range marks {
		if d.o.QueueAll || now.Before(d.paused[m.ref.EndpointID]) {
			queued = append(queued, m)
		} else {
			candidates = append(candidates, m)
		}
	}
	d.mu.Unlock()
	if len(candidates) == 0 {
		return nil, queued, nil
	}
	refs := make([]QueueRef, len(candidates))
	for i, m := range candidates {
		refs[i] = m.ref
	}
	qs, err := d.store.ReadQueues(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range candidates {
		if _, exists := qs[m.ref]; exists {
			queued = append(queued, m)
		} else {
			direct = append(direct, m)
		}
	}
	return direct, queued, nil
}

// pause sends the endpoint's events through queues for directPause.
func (d *Dispatcher) pause(endpointID string) {
	d.mu.Lock()
	d.paused[endpointID] = d.o.Now().Add(directPause)
	d.mu.Unlock()
}

// sendDirect sends m's events (the user's entries of the batch, in
// version order, that ep receives) one after another, and returns the
// rows of those resolved. At an attempt without a 2xx it parks the user
// (park) and stops: the rest wait in the queue.
func (d *Dispatcher) sendDirect(ctx context.Context, m mark, ep Endpoint, entries []ledger.Entry) ([]Row, error) {
	var rows []Row
	for _, e := range entries {
		if e.Version < m.first || e.Version > m.last || !admits(ep, ep.CreateTime, e) {
			continue
		}
		ev, err := d.entryEvent(e)
		if err != nil {
			return rows, err
		}
		release, stopped := d.sendSlot(ctx.Done(), ep.ID)
		if stopped {
			return rows, ctx.Err()
		}
		start := d.o.Now()
		res := d.send(ctx, ep, ev)
		end := d.o.Now()
		release()
		row := Row{
			EndpointID: ep.ID, Event: ev,
			Attempts: 1, Status: res.StatusCode, LastErr: attemptError(res),
		}
		row.Attempt = logged(start, end, res, row.LastErr)
		if res.Gone() {
			d.disable(ctx, ep)
		}
		st := decide(res, 1, d.o.Schedule, end, d.o.Random)
		row.State, row.Next = st.state, st.next
		d.delivered(ep.ID, ev, st.outcome, false)
		if !res.Delivered() || end.Sub(start) > directSlow {
			d.pause(ep.ID)
		}
		if st.resolved() {
			rows = append(rows, row)
			continue
		}
		return rows, d.park(ctx, m, e.Version, row, st)
	}
	return rows, nil
}

// park makes the queue of m with head as its head (done just before it),
// claimed, and writes the head's failed attempt (row, st) on its row and
// the queue, put off to the next attempt. A queue someone else made
// meanwhile (a redelivery's) is left to it: the mark records wanted, and
// its holder sends the events, this one included.
func (d *Dispatcher) park(ctx context.Context, m mark, head int64, row Row, st step) error {
	q, claimed, err := d.markWanted(ctx, m.ref, head, m.last, m.admitFrom, true)
	if err != nil {
		return err
	}
	if !claimed {
		return nil
	}
	if q.Done != head-1 {
		// Claimed, but not made here: deliver it from where it is.
		return d.handOverMarked(ctx, handoff{ref: m.ref, q: &q}, m.last)
	}
	b := &batch{d: d, q: q, cursor: q.Done, wanted: q.Wanted, rows: []Row{row}}
	return b.end(ctx, QueueWrite{
		After: PutOff, Claim: waitUntil(st.next),
		Failed: &FailedAttempt{Attempts: row.Attempts, Status: row.Status, LastErr: row.LastErr, Next: st.next},
	})
}
