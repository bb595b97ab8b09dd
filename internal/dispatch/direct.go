package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Sending directly. A user with no queue for an endpoint (nothing waiting,
// nothing held: a release deletes the queue) is sent the batch's events
// by Apply itself, in version order, before the stream's checkpoint
// moves: the events are in the stream until then, so the stream is the
// queue, and nothing is written per event: a 2xx goes in a pack with
// the batch's others (pack.go; Store.PutPacks, written as packs fill and
// at the batch's end, while the batch's other attempts go on), and only
// an event without a 2xx gets a row (Store.PutRows). One read of the
// batch's queues (Store.ReadQueues: one call a hundred users) says who
// has none. An attempt without a 2xx parks the user behind it: the mark
// makes the queue (done just before the event), claimed, and the failed
// attempt is written on its row and the queue, put off to the next
// attempt, as a queue's head is (deliver.go); the rest of the user's
// events wait in the queue. A dispatcher that dies before the checkpoint
// leaves the batch to be read again: its events are sent again, under the
// same webhook-ids, in version order (at least once).
//
// A user with more than directMost events in the batch (a hot user) is
// queued as well: its events go one after another whichever way, and a
// queue's holder sends them while the stream reads on (its 2xx written in
// groups), where direct sends would wait, batch after batch, for the
// stream's reads and the batch's other work.
//
// An endpoint whose direct attempt failed or took longer than directSlow
// gets its events through queues for directPause, so that one slow or
// failing receiver does not hold the stream (and with it the projection
// that shares it) at each batch: a batch waits for its slowest direct
// attempt, and a direct attempt is given at most directSlow
// (sendDirectly).
const (
	directMost  = 20
	directSlow  = time.Second
	directPause = 30 * time.Second
)

// route splits the batch's marks into those sent directly (no queue, the
// endpoint not paused, at most directMost events) and those marked on
// their queue. Whether a user has a queue is read (Store.ReadQueues) only
// for users this process does not remember without one (noQueue).
func (d *Dispatcher) route(ctx context.Context, marks []mark, eps map[string]Endpoint) (direct, queued []mark, err error) {
	now := d.o.Now()
	var unknown []mark
	d.mu.Lock()
	for _, m := range marks {
		switch seen, ok := d.noQueue[m.ref]; {
		case d.o.QueueAll || m.n > directMost || now.Before(d.paused[m.ref.EndpointID]):
			queued = append(queued, m)
		case ok && seen == eps[m.ref.EndpointID].Redeliveries:
			direct = append(direct, m)
		default:
			unknown = append(unknown, m)
		}
	}
	d.mu.Unlock()
	if len(unknown) == 0 {
		return direct, queued, nil
	}
	refs := make([]QueueRef, len(unknown))
	for i, m := range unknown {
		refs[i] = m.ref
	}
	qs, err := d.store.ReadQueues(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.noQueue)+len(unknown) > noQueueMost {
		clear(d.noQueue)
	}
	for _, m := range unknown {
		if _, exists := qs[m.ref]; exists {
			queued = append(queued, m)
		} else {
			d.noQueue[m.ref] = eps[m.ref.EndpointID].Redeliveries
			direct = append(direct, m)
		}
	}
	return direct, queued, nil
}

// Remembering users without a queue. A stream batch's users are read for
// their queues once, and a user found without one is remembered, with the
// endpoint's Redeliveries as read for that batch, so that its next
// batches are sent directly without a read: in `uniform` the read was a
// call a batch and some 0.04 ms of the emulator a user. Only three
// writers make a queue: this process's stream reader (its marks and
// parks, markWanted, which forgets the user first), a redelivery, and
// another process that held the user's shard of the stream before. A
// redelivery counts itself on the endpoint (CountRedelivery) before it
// moves any queue, and a batch's endpoints are read after its newest
// entry was written (Apply), so a batch with an entry written after a
// redelivery answered sees the count moved and reads its users again
// (what was sent directly while the redelivery went on may arrive once
// more after it, as before); and the whole memory is forgotten when the
// stream consumer takes a shard (ShardTaken), which another process may
// have held. noQueueMost bounds it.
const noQueueMost = 1 << 18

// forget drops ref from the users remembered without a queue: this
// process is about to make or mark its queue.
func (d *Dispatcher) forget(ref QueueRef) {
	d.mu.Lock()
	delete(d.noQueue, ref)
	d.mu.Unlock()
}

// ShardTaken is stream.ShardTaker's: the stream consumer that feeds Apply
// took a shard's lease, which another process may have held and made
// queues under; every user remembered without a queue is read again.
func (d *Dispatcher) ShardTaken(string) {
	d.mu.Lock()
	clear(d.noQueue)
	d.mu.Unlock()
}

// pause sends the endpoint's events through queues for directPause.
func (d *Dispatcher) pause(endpointID string) {
	d.mu.Lock()
	d.paused[endpointID] = d.o.Now().Add(directPause)
	d.mu.Unlock()
}

// sendDirect sends m's events (the user's entries of the batch, in
// version order, that ep receives) one after another, and hands the rows
// of those resolved to put. At an attempt without a 2xx it parks the user
// (park) and stops: the rest wait in the queue.
func (d *Dispatcher) sendDirect(ctx context.Context, m mark, ep Endpoint, entries []ledger.Entry, put func(Row)) error {
	for _, e := range entries {
		if e.Version < m.first || e.Version > m.last || !admits(ep, ep.CreateTime, e) {
			continue
		}
		ev, err := d.entryEvent(e)
		if err != nil {
			return err
		}
		release, stopped := d.sendSlot(ctx.Done(), ep.ID)
		if stopped {
			return ctx.Err()
		}
		start := d.o.Now()
		res := d.sendDirectly(ctx, ep, ev)
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
			put(row)
			continue
		}
		return d.park(ctx, m, e.Version, row, st)
	}
	return nil
}

// sendDirectly is one direct attempt, given at most directSlow: the
// stream (and, with one reading for both, the history) waits for a batch's
// direct sends, so a receiver that does not answer within it has the
// attempt ended there, failed (its user parked, its endpoint paused: the
// next attempts go through queues, each given the Sender's whole timeout).
func (d *Dispatcher) sendDirectly(ctx context.Context, ep Endpoint, ev webhook.Event) webhook.Attempt {
	attemptCtx, cancel := context.WithTimeout(ctx, directSlow)
	defer cancel()
	res := d.send(attemptCtx, ep, ev)
	if res.Err != nil && ctx.Err() == nil && errors.Is(attemptCtx.Err(), context.DeadlineExceeded) {
		res = webhook.Attempt{Err: errDirectSlow}
	}
	return res
}

// errDirectSlow is the error of a direct attempt ended at directSlow.
var errDirectSlow = fmt.Errorf("no answer within %v, which a direct send allows; the next attempts go through the user's queue, with the whole attempt timeout", directSlow)

// rowChunk is how many rows of direct sends are written at once, as soon
// as they are answered, while the batch's other attempts go on.
const rowChunk = 25

// rowWriter writes a batch's resolved direct sends in the background, at
// most four writes at once: the 2xx in packs (Store.PutPacks), each as
// it fills (PackMost) and the rest at close; the others as rows
// (Store.PutRows), rowChunk at a time.
type rowWriter struct {
	d       *Dispatcher
	ctx     context.Context
	mu      sync.Mutex
	pending []Row
	packs   packer
	errs    []error
	wg      sync.WaitGroup
	limit   chan struct{}
}

func (d *Dispatcher) newRowWriter(ctx context.Context) *rowWriter {
	return &rowWriter{d: d, ctx: ctx, limit: make(chan struct{}, 4)}
}

// add takes a resolved direct send: a 2xx into its pack (written once
// full), anything else into the rows, written once there are rowChunk.
func (w *rowWriter) add(r Row) {
	w.mu.Lock()
	var full []Row
	var pack *Pack
	if packable(r) {
		pack = w.packs.add(r)
	} else {
		w.pending = append(w.pending, r)
		if len(w.pending) >= rowChunk {
			full, w.pending = w.pending, nil
		}
	}
	w.mu.Unlock()
	if full != nil {
		w.write(full, nil)
	}
	if pack != nil {
		w.write(nil, []Pack{*pack})
	}
}

func (w *rowWriter) write(rows []Row, packs []Pack) {
	w.wg.Go(func() {
		w.limit <- struct{}{}
		defer func() { <-w.limit }()
		var err error
		if len(rows) > 0 {
			err = w.d.store.PutRows(w.ctx, rows)
		}
		if len(packs) > 0 && err == nil {
			err = w.d.store.PutPacks(w.ctx, packs)
		}
		if err != nil {
			w.mu.Lock()
			w.errs = append(w.errs, err)
			w.mu.Unlock()
		}
	})
}

// close writes what is pending, waits for every write, and returns their
// errors joined.
func (w *rowWriter) close() error {
	w.mu.Lock()
	rest := w.pending
	w.pending = nil
	packs := w.packs.drain()
	w.mu.Unlock()
	if len(rest) > 0 || len(packs) > 0 {
		w.write(rest, packs)
	}
	w.wg.Wait()
	return errors.Join(w.errs...)
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
	b := &batch{d: d, q: q, cursor: q.Done, wanted: q.Wanted}
	b.group(row)
	return b.end(ctx, QueueWrite{
		After: PutOff, Claim: waitUntil(st.next),
		Failed: &FailedAttempt{Attempts: row.Attempts, Status: row.Status, LastErr: row.LastErr, Next: st.next},
	})
}
