package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// deliverQueue delivers what the queue of ref has waiting, in version
// order, while it holds the queue's claim: it stops when the queue is
// empty, when the head failed and waits for its retry, when the claim is
// lost, or when stop is closed (then it releases the queue, due now).
//
// Events answered 2xx are put on the record in groups (flushBatch): their
// delivery rows in one BatchWriteItem, then done moved past them in one
// write. A user whose events wait goes at the pace of the receiver's
// answers, not of two writes per event; a dispatcher that dies before a
// group is written leaves those events to be sent again, under the same
// webhook-ids (at least once).
func (d *Dispatcher) deliverQueue(ctx context.Context, stop <-chan struct{}, ref queueRef) error {
	q, ok, err := d.claim(ctx, ref)
	if err != nil || !ok {
		return err
	}
	b := &batch{d: d, q: q, cursor: q.done}
	for {
		select {
		case <-stop:
			return lost(b.then(ctx, func() error { return d.release(ctx, b.q, 0, 0, "", d.o.Now()) }))
		default:
		}
		d.noteDepth(b.q)
		ep, found, err := d.endpoint(ctx, ref.endpointID)
		switch {
		case err != nil:
			return err
		case !found:
			return lost(b.then(ctx, func() error { return d.drop(ctx, b.q) }))
		case ep.Disabled:
			return lost(b.then(ctx, func() error { return d.release(ctx, b.q, 0, 0, "", d.o.Now().Add(disabledRecheck)) }))
		case b.cursor >= b.q.wanted:
			if err := b.flush(ctx); err != nil {
				return b.onLost(ctx, ref, err)
			}
			if b.q.claimOwner != d.o.Owner {
				return nil // the flush released it: nothing more was wanted
			}
			if b.q.done >= b.q.wanted {
				_, err := d.advance(ctx, b.q, b.q.done)
				return lost(err)
			}
			continue // more was wanted meanwhile
		}
		next, err := b.next(ctx, ep)
		if err != nil {
			if err := b.onLost(ctx, ref, err); err != nil || b.q.claimOwner != d.o.Owner {
				return err
			}
			continue
		}
		if next == nil {
			// The stream showed a version the ledger does not answer yet:
			// try again shortly.
			return lost(b.then(ctx, func() error { return d.release(ctx, b.q, 0, 0, "", d.o.Now().Add(d.o.PollInterval)) }))
		}
		err = b.attempt(ctx, ep, *next)
		if errors.Is(err, errRetryLater) {
			return nil
		}
		if err != nil {
			if err := b.onLost(ctx, ref, err); err != nil || b.q.claimOwner != d.o.Owner {
				return err
			}
		}
	}
}

// batch is a queue under delivery: q as last written, and cursor, the
// version up to which events are resolved (answered 2xx, or skipped) but
// perhaps not yet on the record; rows are the delivery rows of the 2xx
// not yet written.
type batch struct {
	d        *Dispatcher
	q        queue
	cursor   int64
	rows     []deliveryRow
	since    time.Time      // when the oldest unwritten 2xx came
	buffered []ledger.Entry // read from the ledger, versions above cursor
}

// Bounds of a group of 2xx put on the record at once: a BatchWriteItem
// takes 25 items, and a receiver's answers wait at most flushAfter for
// their rows (and a dead dispatcher's successor sends that much again).
const (
	maxBatch   = 25
	flushAfter = 250 * time.Millisecond
)

// next returns the next event the endpoint receives, after skipping (in
// cursor only) the versions it does not; nil when the ledger has none yet.
func (b *batch) next(ctx context.Context, ep webhook.Endpoint) (*ledger.Entry, error) {
	for {
		for len(b.buffered) > 0 && b.buffered[0].Version <= b.cursor {
			b.buffered = b.buffered[1:]
		}
		if len(b.buffered) == 0 || b.buffered[0].Version != b.cursor+1 {
			// Before reading more, put what was delivered on the record.
			if err := b.flush(ctx); err != nil {
				return nil, err
			}
			read, err := b.d.ledger.EntriesAfter(ctx, b.q.ref.userID, b.cursor, int(min(b.q.wanted-b.cursor, maxRead)))
			if err != nil {
				return nil, fmt.Errorf("read entries of %s: %w", b.q.ref.userID, err)
			}
			if len(read) == 0 {
				return nil, nil
			}
			b.buffered = read
		}
		e := b.buffered[0]
		if e.Version > b.q.wanted {
			return nil, nil
		}
		if admits(ep, b.q.admitFrom, e) {
			return &e, nil
		}
		b.cursor = e.Version // not for this endpoint: skipped
		if b.cursor >= b.q.wanted {
			return nil, b.flush(ctx)
		}
	}
}

// attempt sends e, the queue's head as far as this batch goes, once. A
// 2xx joins the group waiting to be written; anything else writes the
// group first, then the failed attempt, on its row and on the queue.
func (b *batch) attempt(ctx context.Context, ep webhook.Endpoint, e ledger.Entry) error {
	d := b.d
	ev, err := d.entryEvent(e)
	if err != nil {
		return err
	}
	attempts := 1
	if e.Version == b.q.done+1 {
		attempts = b.q.attempts + 1
	}
	res := d.send(ctx, ep, ev)
	row := deliveryRow{
		endpointID: ep.ID, event: ev, sk: versionSK(e.Version),
		attempts: attempts, status: res.StatusCode, lastErr: attemptError(res),
	}
	if res.Delivered() {
		row.state = webhook.DeliverySucceeded
		d.delivered(ep.ID, ev, OutcomeSucceeded)
		if len(b.rows) == 0 {
			b.since = d.o.Now()
		}
		b.rows = append(b.rows, row)
		b.cursor = e.Version
		if len(b.rows) >= maxBatch || d.o.Now().Sub(b.since) >= flushAfter {
			return b.flush(ctx)
		}
		return nil
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	if res.Gone() {
		d.disable(ctx, ep)
	}
	next, giveUp := d.o.Schedule.NextAttempt(attempts, d.o.Now(), d.o.Random)
	if giveUp {
		row.state = webhook.DeliveryFailed
		if err := d.putRow(ctx, row); err != nil {
			return err
		}
		d.delivered(ep.ID, ev, OutcomeGaveUp)
		b.cursor = e.Version
		return b.flush(ctx)
	}
	row.state, row.next = webhook.DeliveryPending, next
	if err := d.putRow(ctx, row); err != nil {
		return err
	}
	outcome := OutcomeFailed
	if res.Gone() {
		outcome = OutcomeGone
	}
	d.delivered(ep.ID, ev, outcome)
	if err := d.release(ctx, b.q, attempts, res.StatusCode, row.lastErr, next); err != nil {
		return err
	}
	return errRetryLater
}

// flush puts the group on the record: the delivery rows of its 2xx, then
// done moved to cursor (which renews the claim, or releases the queue
// when nothing more is wanted).
func (b *batch) flush(ctx context.Context) error {
	if b.cursor == b.q.done {
		return nil
	}
	if err := b.d.putRows(ctx, b.rows); err != nil {
		return err
	}
	b.rows = b.rows[:0]
	q, err := b.d.advance(ctx, b.q, b.cursor)
	if err != nil {
		return err
	}
	b.q = q
	return nil
}

// then flushes the group and, if the queue is still this dispatcher's,
// does f (a release or a drop).
func (b *batch) then(ctx context.Context, f func() error) error {
	if err := b.flush(ctx); err != nil {
		return err
	}
	if b.q.claimOwner != b.d.o.Owner {
		return nil
	}
	return f()
}

// onLost handles a write that found the queue moved under this batch: a
// redelivery that moved done under a claim still ours (go on from there,
// dropping the group: its events are to be sent again anyway), or a claim
// another dispatcher took (stop). Any other error is returned.
func (b *batch) onLost(ctx context.Context, ref queueRef, err error) error {
	if !errors.Is(err, errClaimLost) {
		return err
	}
	now, ok, rerr := b.d.readQueue(ctx, ref)
	if rerr != nil {
		return rerr
	}
	if !ok || now.claimOwner != b.d.o.Owner {
		b.q.claimOwner = "" // stop: not ours
		return nil
	}
	b.q, b.cursor, b.rows, b.buffered = now, now.done, b.rows[:0], nil
	return nil
}

// errRetryLater ends a queue's delivery after its head failed and was put
// off to its next attempt.
var errRetryLater = errors.New("head put off to its next attempt")

// lost makes errClaimLost no error: another writer has the queue.
func lost(err error) error {
	if errors.Is(err, errClaimLost) {
		return nil
	}
	return err
}

// send makes one attempt, if the endpoint is still enabled as of a read at
// most EndpointRefresh old: the API waits that long before answering a
// disable or a delete.
func (d *Dispatcher) send(ctx context.Context, ep webhook.Endpoint, ev webhook.Event) webhook.Attempt {
	now, found, err := d.endpoint(ctx, ep.ID)
	switch {
	case err != nil:
		return webhook.Attempt{Err: err}
	case !found || now.Disabled:
		return webhook.Attempt{Err: errors.New("the endpoint was disabled or deleted")}
	}
	body, err := webhook.Body(ev.Type, ev.Time, ev.Data)
	if err != nil {
		return webhook.Attempt{Err: err}
	}
	return d.o.Sender.Send(ctx, now.URL, now.SecretsAt(d.o.Now()), webhook.Message{ID: ev.ID, Body: body})
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
func (d *Dispatcher) disable(ctx context.Context, ep webhook.Endpoint) {
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

// delivered counts an attempt, and measures the lag of a 2xx.
func (d *Dispatcher) delivered(endpointID string, ev webhook.Event, outcome Outcome) {
	lag := d.o.Now().Sub(ev.Time)
	d.mu.Lock()
	d.st.Attempts++
	switch outcome {
	case OutcomeSucceeded:
		d.st.Delivered++
		d.st.Lag = lag
	case OutcomeGaveUp:
		d.st.Failed++
	case OutcomeFailed, OutcomeGone:
	}
	d.mu.Unlock()
	if d.o.Observer.Attempted != nil {
		d.o.Observer.Attempted(endpointID, outcome)
	}
	if outcome == OutcomeSucceeded && d.o.Observer.Delivered != nil {
		d.o.Observer.Delivered(endpointID, lag)
	}
}

// noteDepth records the queue's depth as read, and reports its endpoint's
// sum over the queues this dispatcher has read.
func (d *Dispatcher) noteDepth(q queue) {
	d.mu.Lock()
	d.depth[q.ref] = max(q.wanted-q.done, 0)
	var sum int64
	for ref, n := range d.depth {
		if ref.endpointID == q.ref.endpointID {
			sum += n
		}
	}
	if q.wanted <= q.done {
		delete(d.depth, q.ref)
	}
	// Reported under the lock, so that the reports of one endpoint come in
	// the order of their sums (the hook sets a gauge).
	if d.o.Observer.QueueDepth != nil {
		d.o.Observer.QueueDepth(q.ref.endpointID, sum)
	}
	d.mu.Unlock()
}

// entryEvent is an entry's event: its id is the entry's, its data
// {event_id, user_id, version, entry}.
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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the entry's metadata as the API writes it
	err = enc.Encode(struct {
		EventID string          `json:"event_id"`
		UserID  string          `json:"user_id"`
		Version int64           `json:"version"`
		Entry   json.RawMessage `json:"entry"`
	}{e.ID, e.UserID, e.Version, entry})
	if err != nil {
		return webhook.Event{}, fmt.Errorf("event data: %w", err)
	}
	return webhook.Event{
		ID: e.ID, Type: ledger.EventTypeOf(e.Type), UserID: e.UserID, Version: e.Version,
		Time: e.CreateTime, Data: bytes.TrimSpace(buf.Bytes()),
	}, nil
}

// deliveryRow is what the table keeps of one event's delivery to one
// endpoint.
type deliveryRow struct {
	endpointID string
	event      webhook.Event
	sk         string // "V#<version>" or a notice's "N#<event id>"
	state      webhook.DeliveryState
	attempts   int
	status     int
	lastErr    string
	next       time.Time
}

const noticePrefix = "N#"

func versionSK(v int64) string { return fmt.Sprintf("V#%020d", v) }

func deliveryPK(endpointID, user string) string { return "D#" + endpointID + "#" + user }

func (r deliveryRow) item() map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"PK": str(deliveryPK(r.endpointID, r.event.UserID)), "SK": str(r.sk),
		"delivery_endpoint": str(r.endpointID), "event_id": str(r.event.ID),
		"endpoint_id": str(r.endpointID), "user_id": str(r.event.UserID),
		"version": num(r.event.Version), "type": str(string(r.event.Type)),
		"state": str(string(r.state)), "attempts": num(int64(r.attempts)),
		"last_status_code": num(int64(r.status)), "last_error": str(r.lastErr),
	}
	if !r.next.IsZero() {
		item["next_attempt_time"] = num(r.next.UnixNano())
	}
	return item
}

// putRow writes an entry's delivery row as the attempt left it. The row
// follows the queue, which decides: it is written whole, so a redelivered
// event's row starts again from its first attempt.
// putRows writes rows (at most maxBatch) in one BatchWriteItem, and again
// what DynamoDB leaves unprocessed.
func (d *Dispatcher) putRows(ctx context.Context, rows []deliveryRow) error {
	if len(rows) == 0 {
		return nil
	}
	writes := make([]types.WriteRequest, len(rows))
	for i, r := range rows {
		writes[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: r.item()}}
	}
	for attempt := 0; len(writes) > 0; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
		}
		out, err := d.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{d.table: writes},
		})
		if err != nil {
			return fmt.Errorf("write delivery rows: %w", err)
		}
		writes = out.UnprocessedItems[d.table]
		if attempt >= 10 && len(writes) > 0 {
			return fmt.Errorf("write delivery rows: %d left unprocessed", len(writes))
		}
	}
	return nil
}

func (d *Dispatcher) putRow(ctx context.Context, r deliveryRow) error {
	_, err := d.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &d.table, Item: r.item()})
	if err != nil {
		return fmt.Errorf("write delivery row: %w", err)
	}
	return nil
}

func decodeDelivery(item map[string]types.AttributeValue) webhook.Delivery {
	dl := webhook.Delivery{
		EndpointID:     getS(item, "endpoint_id"),
		EventID:        getS(item, "event_id"),
		Type:           ledger.EventType(getS(item, "type")),
		UserID:         getS(item, "user_id"),
		Version:        getN(item, "version"),
		State:          webhook.DeliveryState(getS(item, "state")),
		Attempts:       int(getN(item, "attempts")),
		LastStatusCode: int(getN(item, "last_status_code")),
		LastError:      getS(item, "last_error"),
	}
	if n := getN(item, "next_attempt_time"); n != 0 && dl.State == webhook.DeliveryPending {
		dl.NextAttemptTime = time.Unix(0, n).UTC()
	}
	return dl
}
