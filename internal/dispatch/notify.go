package dispatch

import (
	"context"
	"fmt"
	"strings"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Notify queues a notice (points.expiring) for every enabled endpoint
// subscribed to its type: a delivery row of its own, SK "N#<event id>",
// that is its own queue of one event, attempted on the same schedule and
// outside the user's version order. A notice already queued for an
// endpoint (the same event id) is not queued again.
func (d *Dispatcher) Notify(ctx context.Context, ev webhook.Event) error {
	if ev.ID == "" || strings.ContainsAny(ev.ID, ". \t\r\n") {
		return fmt.Errorf("notify: event id %q is empty or has a full stop or space", Clip(ev.ID))
	}
	if err := ledger.ValidateUserID(ev.UserID); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if _, err := webhook.Body(ev.Type, ev.Time, ev.Data); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	eps, err := d.endpointsAsOf(ctx, ev.Time)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	now := d.o.Now()
	for _, ep := range eps {
		if ep.Disabled || !ep.Subscription.Includes(ev.Type) {
			continue
		}
		ok, err := d.store.PutNotice(ctx, ep.ID, ev, now)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if d.o.Observer.EventsDispatched != nil {
			d.o.Observer.EventsDispatched(ep.ID, 1)
		}
		d.handOver(QueueRef{EndpointID: ep.ID, UserID: ev.UserID, Notice: ev.ID})
	}
	return nil
}

// deliverNotice claims a due notice row, attempts it once and records the
// outcome on the row, which is the notice's queue.
func (d *Dispatcher) deliverNotice(ctx context.Context, stop <-chan struct{}, ref QueueRef) error {
	now := d.o.Now()
	ev, attempts, ok, err := d.store.ClaimNotice(ctx, ref, d.o.Owner, now, now.Add(d.o.ClaimTTL))
	if err != nil || !ok {
		return err
	}
	ep, found, err := d.endpoint(ctx, ref.EndpointID)
	switch {
	case err != nil:
		return err
	case !found:
		return d.store.WriteNotice(ctx, ref, d.o.Owner, NoticeWrite{Unindex: true})
	case ep.Disabled:
		return d.store.WriteNotice(ctx, ref, d.o.Owner, NoticeWrite{Due: now.Add(disabledRecheck)})
	}
	release, stopped := d.sendSlot(stop, ep.ID)
	if stopped {
		// Due as it was, for any dispatcher.
		return d.store.WriteNotice(ctx, ref, d.o.Owner, NoticeWrite{})
	}
	attempts++
	start := d.o.Now()
	res := d.send(ctx, ep, ev)
	release()
	a := &NoticeAttempt{Attempts: attempts, Status: res.StatusCode, LastErr: attemptError(res)}
	a.Log = logged(start, d.o.Now(), res, a.LastErr)
	if res.Gone() {
		d.disable(ctx, ep)
	}
	st := decide(res, attempts, d.o.Schedule, d.o.Now(), d.o.Random)
	a.State, a.Next = st.state, st.next
	d.delivered(ep.ID, ev, st.outcome, false)
	return d.store.WriteNotice(ctx, ref, d.o.Owner, NoticeWrite{Attempt: a})
}
