package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// deliveriesRead names ListWebhookDeliveries' tokens (their scope's first name).
const deliveriesRead = "ListWebhookDeliveries"

// ListDeliveries pages one endpoint's delivery rows, newest event first:
// every user's through the deliveries_by_endpoint index, by event id
// (ULIDs: time order); one user's from its own partition, consistently,
// by version, its notices after its entries' events. States filter.
func (d *Dispatcher) ListDeliveries(ctx context.Context, q DeliveryQuery) ([]Delivery, string, error) {
	if q.EndpointID == "" {
		return nil, "", EndpointNotFound("")
	}
	if q.UserID != "" {
		if err := ledger.ValidateUserID(q.UserID); err != nil {
			return nil, "", err
		}
	}
	for _, s := range q.States {
		if s != DeliveryPending && s != DeliverySucceeded && s != DeliveryFailed {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter,
				"states: %q is not a delivery state (PENDING, SUCCEEDED, FAILED)", Clip(string(s)))
		}
	}
	size, err := ledger.PageSize(q.PageSize)
	if err != nil {
		return nil, "", err
	}
	if _, err := d.store.Get(ctx, q.EndpointID); err != nil {
		return nil, "", err
	}
	states := slices.Clone(q.States)
	slices.Sort(states)
	scope := []string{deliveriesRead, q.EndpointID, q.UserID, fmt.Sprint(states)}
	after := ""
	if q.PageToken != "" {
		if after, err = d.o.Codec.DecodeKey(q.PageToken, scope...); err != nil {
			return nil, "", err
		}
	}
	q.States = states
	out, last, err := d.store.ListDeliveries(ctx, q, size, after)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if last != "" {
		next = d.o.Codec.EncodeKey(last, scope...)
	}
	return out, next, nil
}

// Redeliver sends an endpoint's events again, read from the ledger: one
// user's (r.UserID) or those of every user the endpoint has a queue for,
// from r.FromVersion, from the first entry at or after r.StartTime, or
// (neither) from the first entry the endpoint receives. It moves each
// queue's done back (never wanted forward; a user without a queue gets
// one), and asking for a version or a time lets the queue admit entries
// older than the endpoint. It returns the number of events to be sent:
// those the endpoint subscribes to, from that point to the user's last
// entry. A redelivered event's row starts again at its next attempt.
func (d *Dispatcher) Redeliver(ctx context.Context, r Redelivery) (int64, error) {
	if r.EndpointID == "" {
		return 0, EndpointNotFound("")
	}
	if r.FromVersion < 0 {
		return 0, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "from_version must not be negative")
	}
	if r.FromVersion > 0 && !r.StartTime.IsZero() {
		return 0, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "give from_version or start_time, not both")
	}
	if r.UserID != "" {
		if err := ledger.ValidateUserID(r.UserID); err != nil {
			return 0, err
		}
	}
	ep, err := d.store.Get(ctx, r.EndpointID)
	if err != nil {
		return 0, err
	}
	if r.UserID != "" {
		return d.redeliverUser(ctx, ep, r.UserID, r)
	}
	var total int64
	err = d.store.QueueUsers(ctx, ep.ID, func(user string) error {
		n, err := d.redeliverUser(ctx, ep, user, r)
		total += n
		return err
	})
	return total, err
}

// redeliverUser moves back the queue of ep and user as r asks, and
// returns how many events it will send.
func (d *Dispatcher) redeliverUser(ctx context.Context, ep Endpoint, user string, r Redelivery) (int64, error) {
	ref := QueueRef{EndpointID: ep.ID, UserID: user}
	for {
		q, exists, err := d.store.ReadQueue(ctx, ref)
		if err != nil {
			return 0, err
		}
		admitFrom, from := redeliveryStart(r, ep, q, exists)
		target, last, count, err := d.redeliverySpan(ctx, ep, user, r.FromVersion, from, admitFrom)
		if err != nil || count == 0 {
			return 0, err
		}
		m := moveBack(q, exists, target, last, admitFrom, d.o.Now())
		err = d.store.MoveBack(ctx, ref, q, exists, m)
		if errors.Is(err, ErrQueueChanged) {
			continue // another writer in between: read again
		}
		if err != nil {
			return 0, err
		}
		d.handOver(ref)
		return count, nil
	}
}

// redeliverySpan reads user's entries and finds where a redelivery starts
// (target: done is moved back to it) and the last version, and counts the
// events ep will receive after target: from fromVersion if given, else
// from the first entry created at or after from; admitted from admitFrom.
func (d *Dispatcher) redeliverySpan(ctx context.Context, ep Endpoint, user string, fromVersion int64, from, admitFrom time.Time) (target, last int64, count int64, err error) {
	after := int64(0)
	found := false
	if fromVersion > 0 {
		after, target, found = fromVersion-1, fromVersion-1, true
	}
	const page = 500
	for {
		es, err := d.ledger.EntriesAfter(ctx, user, after, page)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("redeliver: entries of %s: %w", user, err)
		}
		for _, e := range es {
			if !found && !e.CreateTime.Before(from) {
				target, found = e.Version-1, true
			}
			if found && admits(ep, admitFrom, e) {
				count++
			}
			last = e.Version
		}
		if len(es) < page {
			return target, last, count, nil
		}
		after = es[len(es)-1].Version
	}
}
