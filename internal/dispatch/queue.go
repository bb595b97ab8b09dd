package dispatch

import (
	"context"
	"errors"
	"time"
)

// waitUntil is the claim of a queue put off until t: Waiting's.
func waitUntil(t time.Time) Claim { return Claim{Owner: Waiting, Until: t} }

// markWanted records on the queue of ref that versions up to last are
// wanted (Store.MarkWanted), making the queue if there is none (done just
// before first). A queue already wanting as much is left alone. A queue
// that was idle becomes due now; one waiting for a retry keeps its due
// time.
//
// With take, the same write also claims the queue for this dispatcher if
// it was idle (no claim owner at all: never claimed, or released with
// nothing wanted): claimed says it did, and q is the queue as written, so
// that delivery starts without a claim of its own. A queue someone holds
// or one put off (Waiting) is left to its holder or to its due time.
//
// The mark does not move the record version: only wanted changes, and a
// claim holder's writes check wanted where it matters (a release requires
// wanted <= done), so that marking a queue under delivery does not make
// its holder read it again.
func (d *Dispatcher) markWanted(ctx context.Context, ref QueueRef, first, last int64, admitFrom time.Time, take bool) (q Queue, claimed bool, err error) {
	d.forget(ref)
	now := d.o.Now()
	m := Mark{First: first, Last: last, AdmitFrom: admitFrom, Now: now}
	if take {
		m.Claim = &Claim{Owner: d.o.Owner, Until: now.Add(d.o.ClaimTTL)}
	}
	q, claimed, _, err = d.store.MarkWanted(ctx, ref, m)
	return q, claimed, err
}

// claim takes the queue of ref for this dispatcher until now+ClaimTTL, if
// it is due, has events waiting and no one else holds it. ok is false
// when it may not be taken. The queue's due time moves to the claim's
// end: other dispatchers find it in the index again only if the claim
// expires, not at every read while this one delivers.
func (d *Dispatcher) claim(ctx context.Context, ref QueueRef) (q Queue, ok bool, err error) {
	now := d.o.Now()
	return d.store.Claim(ctx, ref, d.o.Owner, now, now.Add(d.o.ClaimTTL))
}

// errClaimLost ends a delivery whose queue another dispatcher took: the
// claim expired and another holds it, or the queue is gone.
var errClaimLost = errors.New("queue claim lost")

// errRedelivered ends a write that found its queue moved by a redelivery
// under a claim still this dispatcher's: the queue as read is returned
// with it, to go on from.
var errRedelivered = errors.New("queue moved by a redelivery")

// write puts the rows (the delivery rows of the events w resolves, and
// of a failed head: those answered 2xx at their first attempt in packs
// instead) and w on the record in one write (Store.WriteQueue), so that
// done never passes an event whose row or pack is not written. The write
// is conditional on the record version q was read at (claims and
// redeliveries move it; a mark of wanted does not). When it fails, the
// queue is read again: a claim that is no longer this dispatcher's is
// errClaimLost, a moved record version (a redelivery) errRedelivered with
// the queue as read; a raised wanted alone is written again, keeping the
// claim if w released it.
func (d *Dispatcher) write(ctx context.Context, q Queue, rows []Row, w QueueWrite) (Queue, error) {
	// The group's 2xx at a first attempt go in packs, the rest on rows.
	rows, w.Packs = splitPacked(rows)
	for {
		w = settle(w, q.Wanted)
		if w.After == KeepClaim {
			w.Claim = Claim{Owner: d.o.Owner, Until: d.o.Now().Add(d.o.ClaimTTL)}
		}
		err := d.store.WriteQueue(ctx, q, rows, w)
		if err == nil {
			return q.Applied(w), nil
		}
		if !errors.Is(err, ErrQueueChanged) {
			return q, err
		}
		now, ok, err := d.store.ReadQueue(ctx, q.Ref)
		if err != nil {
			return q, err
		}
		switch afterConflict(q, now, ok, d.o.Owner) {
		case claimLost:
			return q, errClaimLost
		case redelivered:
			return now, errRedelivered
		case writeAgain:
		}
		q.Wanted = now.Wanted
	}
}
