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
func (d *Dispatcher) deliverQueue(ctx context.Context, stop <-chan struct{}, ref queueRef) error {
	q, ok, err := d.claim(ctx, ref)
	if err != nil || !ok {
		return err
	}
	var buffered []ledger.Entry // read from the ledger, versions above q.done
	for {
		select {
		case <-stop:
			return lost(d.release(ctx, q, 0, 0, "", d.o.Now()))
		default:
		}
		d.noteDepth(q)
		ep, found, err := d.endpoint(ctx, ref.endpointID)
		switch {
		case err != nil:
			return err
		case !found:
			return lost(d.drop(ctx, q))
		case ep.Disabled:
			return lost(d.release(ctx, q, 0, 0, "", d.o.Now().Add(disabledRecheck)))
		case q.done >= q.wanted:
			_, err := d.advance(ctx, q, q.done)
			return lost(err)
		}
		for len(buffered) > 0 && buffered[0].Version <= q.done {
			buffered = buffered[1:]
		}
		if len(buffered) == 0 || buffered[0].Version != q.done+1 {
			buffered, err = d.ledger.EntriesAfter(ctx, ref.userID, q.done, int(min(q.wanted-q.done, maxRead)))
			if err != nil {
				return fmt.Errorf("read entries of %s: %w", ref.userID, err)
			}
			if len(buffered) == 0 {
				// The stream showed a version the ledger does not answer
				// yet: try again shortly.
				return lost(d.release(ctx, q, 0, 0, "", d.o.Now().Add(d.o.PollInterval)))
			}
		}
		// Skip what the endpoint does not receive, in one write.
		skipTo := q.done
		for _, e := range buffered {
			if e.Version > q.wanted || admits(ep, q.admitFrom, e) {
				break
			}
			skipTo = e.Version
		}
		if skipTo > q.done {
			q, err = d.advance(ctx, q, skipTo)
		} else {
			q, err = d.attemptHead(ctx, ep, q, buffered[0])
		}
		if errors.Is(err, errClaimLost) {
			// A redelivery moved done under a claim still ours: go on from
			// there; a claim another dispatcher took: stop.
			now, ok, rerr := d.readQueue(ctx, ref)
			if rerr != nil || !ok || now.claimOwner != d.o.Owner {
				return rerr
			}
			q, err = now, nil
		}
		if errors.Is(err, errRetryLater) {
			return nil
		}
		if err != nil {
			return err
		}
		if q.claimOwner != d.o.Owner {
			// advance released the queue: nothing more was wanted.
			d.noteDepth(q)
			return nil
		}
	}
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

// attemptHead sends the queue's head e once and records the outcome on
// its delivery row and on the queue.
func (d *Dispatcher) attemptHead(ctx context.Context, ep webhook.Endpoint, q queue, e ledger.Entry) (queue, error) {
	ev, err := d.entryEvent(e)
	if err != nil {
		return q, err
	}
	attempts := q.attempts + 1
	res := d.send(ctx, ep, ev)
	row := deliveryRow{
		endpointID: ep.ID, event: ev, sk: versionSK(e.Version),
		attempts: attempts, status: res.StatusCode, lastErr: attemptError(res),
	}
	switch {
	case res.Delivered():
		row.state = webhook.DeliverySucceeded
		if err := d.putRow(ctx, row); err != nil {
			return q, err
		}
		d.delivered(ep.ID, ev, OutcomeSucceeded)
		return d.advance(ctx, q, e.Version)
	case res.Gone():
		d.disable(ctx, ep)
	}
	next, giveUp := d.o.Schedule.NextAttempt(attempts, d.o.Now(), d.o.Random)
	if giveUp {
		row.state = webhook.DeliveryFailed
		if err := d.putRow(ctx, row); err != nil {
			return q, err
		}
		d.delivered(ep.ID, ev, OutcomeGaveUp)
		return d.advance(ctx, q, e.Version)
	}
	row.state, row.next = webhook.DeliveryPending, next
	if err := d.putRow(ctx, row); err != nil {
		return q, err
	}
	outcome := OutcomeFailed
	if res.Gone() {
		outcome = OutcomeGone
	}
	d.delivered(ep.ID, ev, outcome)
	if err := d.release(ctx, q, attempts, res.StatusCode, row.lastErr, next); err != nil {
		return q, err
	}
	return q, errRetryLater
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
