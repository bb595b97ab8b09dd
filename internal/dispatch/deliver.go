package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// deliverQueue delivers what the queue of h.ref has waiting, in version
// order, while it holds the queue's claim (h.q: claimed by the mark that
// handed it over; nil: claimed here): it stops when the queue is empty,
// when the head failed and waits for its retry, when the claim is lost,
// or when stop is closed (then it puts the queue off until now, due at
// once for any dispatcher).
//
// The events answered 2xx one after another are put on the record in
// groups (batch.commit): their delivery rows and done moved past them in
// one write, renewing the claim, or releasing it when nothing more is
// wanted. One user's waiting events go at the pace of the receiver's
// answers, not of a round of writes each; a dispatcher that dies before
// a group is written leaves its events to be sent again, under the same
// webhook-ids (at least once).
func (d *Dispatcher) deliverQueue(ctx context.Context, stop <-chan struct{}, h handoff) error {
	q := h.q
	if q == nil {
		claimed, ok, err := d.claim(ctx, h.ref)
		if err != nil || !ok {
			return err
		}
		q = &claimed
	}
	b := &batch{d: d, q: *q, cursor: q.Done, wanted: q.Wanted}
	b.take(h.entries, 0)
	d.noteDepth(b.q.Ref, b.wanted-b.cursor)
	for {
		select {
		case <-stop:
			return b.end(ctx, QueueWrite{After: PutOff, Claim: waitUntil(d.o.Now())})
		default:
		}
		b.takeInbox()
		ep, found, err := d.endpoint(ctx, h.ref.EndpointID)
		switch {
		case err != nil:
			return err
		case !found:
			return b.end(ctx, QueueWrite{After: Drop})
		case ep.Disabled:
			return b.end(ctx, QueueWrite{After: PutOff, Claim: waitUntil(d.o.Now().Add(disabledRecheck))})
		case b.cursor >= b.wanted:
			// Nothing more known to be wanted: a queue the stream handed
			// entries lately waits for more (a hot user's next stream
			// batch; linger), so that one write (and one pack) takes
			// several batches' events and the queue is not deleted and
			// made again at each; then the group goes on the record and
			// the claim with it, unless wanted rose meanwhile.
			if d.awaitInbox(stop, b.q.Ref, b.linger(d.o.Now())) {
				continue
			}
			err := b.commit(ctx, QueueWrite{After: Release})
			if err == nil && b.q.ClaimOwner != d.o.Owner {
				return nil
			}
			if err := b.goOn(err); err != nil {
				return lost(err)
			}
			continue
		}
		e, err := b.next(ctx, ep)
		if err != nil {
			return err
		}
		if e == nil {
			if b.cursor >= b.wanted {
				continue // the rest is not for this endpoint
			}
			// The stream showed a version the ledger does not answer yet:
			// try again shortly.
			return b.end(ctx, QueueWrite{After: PutOff, Claim: waitUntil(d.o.Now().Add(d.o.PollInterval))})
		}
		release, stopped := d.sendSlot(stop, ep.ID)
		if stopped {
			return b.end(ctx, QueueWrite{After: PutOff, Claim: waitUntil(d.o.Now())})
		}
		if b.q.ClaimUntil.Sub(d.o.Now()) < d.o.ClaimTTL*3/4 {
			// An old claim (a long wait for the slot, a slow receiver) is
			// renewed before the attempt, so that the attempt ends before
			// it does (ClaimTTL outlasts an attempt; three quarters of it
			// do for attempt timeouts up to 90 s with ledgerd's 30 s more),
			// and a claim another dispatcher took after it expired is
			// found before a send, not after.
			if err := b.goOn(b.commit(ctx, QueueWrite{After: KeepClaim})); err != nil {
				release()
				return lost(err)
			}
		}
		err = b.attempt(ctx, ep, *e)
		release()
		if errors.Is(err, errRetryLater) {
			return nil
		}
		if err := b.goOn(err); err != nil {
			return lost(err)
		}
	}
}

// batch is a queue under delivery: q as last written; cursor, the version
// up to which its events are resolved (answered 2xx, given up, or
// skipped), on the record or not yet; rows, the delivery rows not yet
// written; wanted, the highest version known to be wanted (the queue's,
// or a mark's since).
type batch struct {
	d        *Dispatcher
	q        Queue
	cursor   int64
	wanted   int64
	rows     []Row
	since    time.Time      // when the oldest unwritten row was made
	buffered []ledger.Entry // the user's entries above cursor, in version order
	taken    time.Time      // when the stream last handed entries over (Apply)
	// What rows make when written (splitPacked): packs (those of packed,
	// open, and closed, full ones) and loose rows.
	packed        packer
	closed, loose int
}

// Bounds of a group put on the record at once: maxGroup items (its packs
// and rows), with the queue and a failed head's row still within a
// transaction's 100 items; and flushAfter, the longest a 2xx waits to be
// written (and what a dead dispatcher's successor may send again).
const (
	maxGroup   = 90
	flushAfter = 250 * time.Millisecond
)

// group adds r to the rows to be written, counting the items they make.
func (b *batch) group(r Row) {
	if len(b.rows) == 0 {
		b.since = b.d.o.Now()
	}
	b.rows = append(b.rows, r)
	switch {
	case !packable(r):
		b.loose++
	case b.packed.add(r) != nil:
		b.closed++
	}
}

// items is how many items the rows make when written.
func (b *batch) items() int { return b.loose + b.closed + len(b.packed.open) }

// regroup counts the items of rows, which replace the batch's.
func (b *batch) regroup(rows []Row) {
	b.rows, b.packed, b.closed, b.loose = nil, packer{}, 0, 0
	for _, r := range rows {
		b.group(r)
	}
}

// linger is how long a queue with nothing more known to be wanted waits at
// now for Apply to hand it more: up to flushAfter after the stream last
// did, and no longer than its unwritten group may wait; none for a queue
// the stream handed nothing (a retry, a redelivery).
func (b *batch) linger(now time.Time) time.Duration {
	if b.taken.IsZero() {
		return 0
	}
	until := b.taken.Add(flushAfter)
	if len(b.rows) > 0 {
		until = minTime(until, b.since.Add(flushAfter))
	}
	return until.Sub(now)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// take adds entries (the stream's, handed over by Apply) to those
// buffered, and raises wanted to what the mark recorded.
func (b *batch) take(entries []ledger.Entry, wanted int64) {
	b.wanted = max(b.wanted, wanted)
	if len(entries) == 0 {
		return
	}
	b.taken = b.d.o.Now()
	all := append(slices.Clone(b.buffered), entries...)
	slices.SortFunc(all, func(x, y ledger.Entry) int { return cmp.Compare(x.Version, y.Version) })
	all = slices.CompactFunc(all, func(x, y ledger.Entry) bool { return x.Version == y.Version })
	b.buffered = all
}

// takeInbox takes what Apply left for this queue while it was delivered.
func (b *batch) takeInbox() {
	b.d.mu.Lock()
	in := b.d.inbox[b.q.Ref]
	delete(b.d.inbox, b.q.Ref)
	b.d.mu.Unlock()
	if in != nil {
		b.take(in.entries, in.wanted)
	}
}

// next returns the next event the endpoint receives, after skipping (in
// cursor only) the versions it does not: from the entries handed over,
// or else read from the ledger. It returns nil when the ledger has none
// yet, or when the rest of what is wanted is not for this endpoint
// (cursor then reaches wanted).
func (b *batch) next(ctx context.Context, ep Endpoint) (*ledger.Entry, error) {
	for b.cursor < b.wanted {
		i := 0
		for i < len(b.buffered) && b.buffered[i].Version <= b.cursor {
			i++
		}
		b.buffered = b.buffered[i:]
		if len(b.buffered) == 0 || b.buffered[0].Version != b.cursor+1 {
			read, err := b.d.ledger.EntriesAfter(ctx, b.q.Ref.UserID, b.cursor, int(min(b.wanted-b.cursor, maxRead)))
			if err != nil {
				return nil, fmt.Errorf("read entries of %s: %w", b.q.Ref.UserID, err)
			}
			if len(read) == 0 || read[0].Version != b.cursor+1 {
				return nil, nil
			}
			b.buffered = nil
			b.take(read, 0)
		}
		e := b.buffered[0]
		if admits(ep, b.q.AdmitFrom, e) {
			return &e, nil
		}
		b.cursor = e.Version // not for this endpoint: skipped
	}
	return nil, nil
}

// attempt sends e, the next event, once. A 2xx joins the group waiting to
// be written (written once it is full or old enough); an attempt that was
// the last (FAILED) ends the group, written at once. Any other outcome
// writes the group with the failed attempt, on its row and on the queue,
// and puts the queue off to the next attempt (errRetryLater).
func (b *batch) attempt(ctx context.Context, ep Endpoint, e ledger.Entry) error {
	d := b.d
	ev, err := d.entryEvent(e)
	if err != nil {
		return err
	}
	attempts := attemptNumber(b.q, e.Version)
	start := d.o.Now()
	res := d.send(ctx, ep, ev)
	again := e.Version <= b.q.ResolvedHigh
	row := Row{
		EndpointID: ep.ID, Event: ev,
		Attempts: attempts, Status: res.StatusCode, LastErr: attemptError(res),
	}
	row.Attempt = logged(start, d.o.Now(), res, row.LastErr)
	if res.Gone() {
		d.disable(ctx, ep)
	}
	st := decide(res, attempts, d.o.Schedule, d.o.Now(), d.o.Random)
	row.State, row.Next = st.state, st.next
	d.delivered(ep.ID, ev, st.outcome, again)
	if st.resolved() {
		b.group(row)
		b.cursor = e.Version
		if flushNow(st, b.items(), d.o.Now().Sub(b.since)) {
			return b.commit(ctx, QueueWrite{After: KeepClaim})
		}
		return nil
	}
	b.group(row)
	err = b.commit(ctx, QueueWrite{
		After: PutOff, Claim: waitUntil(st.next),
		Failed: &FailedAttempt{Attempts: attempts, Status: res.StatusCode, LastErr: row.LastErr, Next: st.next},
	})
	if err != nil {
		return err
	}
	return errRetryLater
}

// commit puts the group on the record: its rows and done moved to cursor
// in one write, with w's claim. A redelivery that moved the queue
// meanwhile is taken into account (redelivered) and the group written
// again as it then stands, keeping the claim; commit then returns
// errRedelivered, for the caller to go on from the new cursor.
func (b *batch) commit(ctx context.Context, w QueueWrite) error {
	moved := false
	for {
		w.Done = b.cursor
		q, err := b.d.write(ctx, b.q, b.rows, w)
		if errors.Is(err, errRedelivered) {
			b.redelivered(q)
			w, moved = QueueWrite{After: KeepClaim}, true
			continue
		}
		if err != nil {
			return err
		}
		b.q = q
		b.regroup(nil)
		b.wanted = max(b.wanted, q.Wanted)
		depth := b.wanted - b.cursor
		if q.ClaimOwner != b.d.o.Owner {
			depth = max(q.Wanted-q.Done, 0)
		}
		b.d.noteDepth(q.Ref, depth)
		if moved {
			return errRedelivered
		}
		return nil
	}
}

// redelivered takes into account a redelivery that moved the queue (now,
// as read) under this batch: it asked for the events after now.Redo to
// be sent again, and moved done back to at most it. The group's events up
// to there stay resolved, to be written; the rest are sent again.
func (b *batch) redelivered(now Queue) {
	to, kept := redo(now, b.cursor, b.rows)
	// What this batch sent past to was resolved once: sent again, it is a
	// redelivery.
	now.ResolvedHigh = max(now.ResolvedHigh, b.cursor)
	b.q, b.cursor = now, to
	since := b.since
	b.regroup(kept)
	b.since = since // the group is as old as its oldest row
	b.wanted = max(b.wanted, now.Wanted)
}

// end writes the group and w, which ends the claim (a PutOff or a drop).
func (b *batch) end(ctx context.Context, w QueueWrite) error {
	err := b.commit(ctx, w)
	if errors.Is(err, errRedelivered) {
		err = b.commit(ctx, w)
	}
	return lost(err)
}

// goOn says whether delivery goes on after err: nil and a redelivery
// (from the batch as it now stands) do; anything else is returned.
func (b *batch) goOn(err error) error {
	if err == nil || errors.Is(err, errRedelivered) {
		return nil
	}
	return err
}

// awaitInbox waits up to wait for Apply to leave entries for the queue of
// ref under delivery here (handOverMarked), or for stop: true if either
// came, false when the wait ended.
func (d *Dispatcher) awaitInbox(stop <-chan struct{}, ref QueueRef, wait time.Duration) bool {
	if wait <= 0 {
		return false
	}
	d.mu.Lock()
	if d.inbox[ref] != nil {
		d.mu.Unlock()
		return true
	}
	wake := make(chan struct{}, 1)
	d.wakeQueue[ref] = wake
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.wakeQueue, ref)
		d.mu.Unlock()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-stop:
		return true
	case <-t.C:
		return false
	}
}

// errRetryLater ends a queue's delivery after its head failed and was put
// off to its next attempt.
var errRetryLater = errors.New("head put off to its next attempt")

// lost makes errClaimLost no error: another dispatcher has the queue.
func lost(err error) error {
	if errors.Is(err, errClaimLost) {
		return nil
	}
	return err
}

// sendSlot waits for one of the endpoint's PerEndpoint attempt slots, or
// for stop (then stopped); release gives the slot back.
func (d *Dispatcher) sendSlot(stop <-chan struct{}, endpointID string) (release func(), stopped bool) {
	d.mu.Lock()
	slot, ok := d.slots[endpointID]
	if !ok {
		slot = make(chan struct{}, d.o.PerEndpoint)
		d.slots[endpointID] = slot
	}
	d.mu.Unlock()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, false
	case <-stop:
		return func() {}, true
	}
}

// send makes one attempt, if the endpoint is still enabled as of a read at
// most EndpointRefresh old: the API waits that long before answering a
// disable or a delete.
func (d *Dispatcher) send(ctx context.Context, ep Endpoint, ev webhook.Event) webhook.Attempt {
	now, found, err := d.endpoint(ctx, ep.ID)
	switch {
	case err != nil:
		return webhook.Attempt{Err: err}
	case !found || now.Disabled:
		return webhook.Attempt{Err: errors.New("the endpoint was disabled or deleted")}
	}
	body, err := ev.Body()
	if err != nil {
		return webhook.Attempt{Err: err}
	}
	return d.o.Sender.Send(ctx, now.URL, now.SecretsAt(d.o.Now()), webhook.Message{ID: ev.ID, Body: body})
}

// logged is an attempt made from start to end that answered res (lastErr
// its error as the row keeps it), as the delivery's attempt log keeps it.
func logged(start, end time.Time, res webhook.Attempt, lastErr string) Attempt {
	return Attempt{Time: start.UTC(), Status: res.StatusCode, Error: lastErr, Duration: max(end.Sub(start), 0)}
}

func attemptError(a webhook.Attempt) string {
	switch {
	case a.Err != nil:
		return clipError(a.Err.Error())
	case !a.Delivered():
		return fmt.Sprintf("the receiver answered %d", a.StatusCode)
	}
	return ""
}

// clipError bounds what a row keeps of an error.
func clipError(s string) string {
	const limit = 500
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}

// disable disables the endpoint after a 410, naming it as the reason.
func (d *Dispatcher) disable(ctx context.Context, ep Endpoint) {
	err := d.store.Disable(ctx, ep.ID, "the receiver answered 410 Gone")
	if err != nil {
		d.o.Log.Warn("disable endpoint after 410", "endpoint_id", ep.ID, "error", err)
		return
	}
	d.epMu.Lock()
	if e, ok := d.eps[ep.ID]; ok {
		eps := maps.Clone(d.eps) // others may be reading the old map
		e.Disabled = true
		eps[ep.ID] = e
		d.eps = eps
	}
	d.epMu.Unlock()
	if d.o.Observer.EndpointDisabled != nil {
		d.o.Observer.EndpointDisabled(ep.ID)
	}
}

// delivered counts an attempt, and measures the lag of a 2xx: of an
// event's first delivery only. A redelivery (again: RedeliverWebhookEvents
// sent an event resolved before) is counted apart, as its lag is the time
// since the entry was written, not how late delivery runs.
func (d *Dispatcher) delivered(endpointID string, ev webhook.Event, outcome Outcome, again bool) {
	lag := d.o.Now().Sub(ev.Time)
	d.mu.Lock()
	d.st.Attempts++
	switch outcome {
	case OutcomeSucceeded:
		d.st.Delivered++
		if again {
			d.st.Redelivered++
		} else {
			d.st.Lag = lag
		}
	case OutcomeGaveUp:
		d.st.Failed++
	case OutcomeFailed, OutcomeGone:
	}
	d.mu.Unlock()
	if d.o.Observer.Attempted != nil {
		d.o.Observer.Attempted(endpointID, outcome)
	}
	switch {
	case outcome != OutcomeSucceeded:
	case again && d.o.Observer.Redelivered != nil:
		d.o.Observer.Redelivered(endpointID)
	case !again && d.o.Observer.Delivered != nil:
		d.o.Observer.Delivered(endpointID, lag)
	}
}

// noteDepth records a queue's depth (wanted - done as this dispatcher
// knows them), and reports its endpoint's sum over the queues this
// dispatcher has seen.
func (d *Dispatcher) noteDepth(ref QueueRef, depth int64) {
	d.mu.Lock()
	d.depth[ref] = max(depth, 0)
	var sum int64
	for r, n := range d.depth {
		if r.EndpointID == ref.EndpointID {
			sum += n
		}
	}
	if depth <= 0 {
		delete(d.depth, ref)
	}
	// Reported under the lock, so that the reports of one endpoint come in
	// the order of their sums (the hook sets a gauge).
	if d.o.Observer.QueueDepth != nil {
		d.o.Observer.QueueDepth(ref.EndpointID, sum)
	}
	d.mu.Unlock()
}

// entryEvent is an entry's event: its id is the entry's, its data
// {event_id, user_id, version, entry}, its body built with it (send sends
// it as built).
//
// The entry is as it was written: a purchase's refunded_amount and a
// grant's reversed_amount grow with later entries (which are events of
// their own), and read as they are now they would give one webhook-id
// another body at a later attempt or redelivery.
func (d *Dispatcher) entryEvent(e ledger.Entry) (webhook.Event, error) {
	e.RefundedAmount, e.ReversedAmount = decimal.Zero, decimal.Zero
	entry, err := d.o.EncodeEntry(e)
	if err != nil {
		return webhook.Event{}, fmt.Errorf("encode entry %s v%d: %w", e.UserID, e.Version, err)
	}
	return webhook.NewEntryEvent(e.ID, ledger.EventTypeOf(e.Type), e.UserID, e.Version, e.CreateTime, entry)
}
