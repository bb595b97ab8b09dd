package dispatch

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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
		return fmt.Errorf("notify: event id %q is empty or has a full stop or space", clip(ev.ID))
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
		row := deliveryRow{endpointID: ep.ID, event: ev, sk: noticePrefix + ev.ID, state: webhook.DeliveryPending}
		item := row.item()
		item["data"] = str(string(ev.Data))
		item["event_time"] = num(ev.Time.UnixNano())
		item["due_shard"] = str(dueShard(getS(item, "PK"), row.sk))
		item["due_time"] = str(dueText(now))
		_, err := d.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &d.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		if d.o.Observer.EventsDispatched != nil {
			d.o.Observer.EventsDispatched(ep.ID, 1)
		}
		d.handOver(queueRef{endpointID: ep.ID, userID: ev.UserID, notice: row.sk})
	}
	return nil
}

func noticeKey(ref queueRef) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": str(deliveryPK(ref.endpointID, ref.userID)), "SK": str(ref.notice)}
}

// deliverNotice claims a due notice row, attempts it once and records the
// outcome on the row, which is the notice's queue.
func (d *Dispatcher) deliverNotice(ctx context.Context, stop <-chan struct{}, ref queueRef) error {
	now := d.o.Now()
	out, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &d.table,
		Key:              noticeKey(ref),
		UpdateExpression: aws.String("SET claim_owner = :me, claim_until = :until"),
		ConditionExpression: aws.String("#state = :pending AND due_time <= :nowText AND " +
			"(attribute_not_exists(claim_until) OR claim_until < :now OR claim_owner = :me)"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": str(d.o.Owner), ":until": num(now.Add(d.o.ClaimTTL).UnixNano()), ":now": num(now.UnixNano()),
			":nowText": str(dueText(now)), ":pending": str(string(webhook.DeliveryPending)),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("claim notice: %w", err)
	}
	item := out.Attributes
	ev := webhook.Event{
		ID: getS(item, "event_id"), Type: ledger.EventType(getS(item, "type")), UserID: ref.userID,
		Version: getN(item, "version"), Time: time.Unix(0, getN(item, "event_time")).UTC(),
		Data: []byte(getS(item, "data")),
	}
	ep, found, err := d.endpoint(ctx, ref.endpointID)
	switch {
	case err != nil:
		return err
	case !found:
		return d.updateNotice(ctx, ref, "REMOVE due_shard, due_time, claim_owner, claim_until", nil)
	case ep.Disabled:
		return d.updateNotice(ctx, ref, "SET due_time = :due REMOVE claim_owner, claim_until",
			map[string]types.AttributeValue{":due": str(dueText(now.Add(disabledRecheck)))})
	}
	release, stopped := d.sendSlot(stop, ep.ID)
	if stopped {
		// Due as it was, for any dispatcher.
		return d.updateNotice(ctx, ref, "REMOVE claim_owner, claim_until", nil)
	}
	attempts := int(getN(item, "attempts")) + 1
	res := d.send(ctx, ep, ev)
	release()
	values := map[string]types.AttributeValue{
		":a": num(int64(attempts)), ":status": num(int64(res.StatusCode)), ":err": str(attemptError(res)),
	}
	const recorded = "SET attempts = :a, last_status_code = :status, last_error = :err, #state = :state"
	if res.Gone() {
		d.disable(ctx, ep)
	}
	next, giveUp := d.o.Schedule.NextAttempt(attempts, d.o.Now(), d.o.Random)
	switch {
	case res.Delivered():
		values[":state"] = str(string(webhook.DeliverySucceeded))
		d.delivered(ep.ID, ev, OutcomeSucceeded, false)
		return d.updateNotice(ctx, ref, recorded+" REMOVE due_shard, due_time, claim_owner, claim_until, next_attempt_time", values)
	case giveUp:
		values[":state"] = str(string(webhook.DeliveryFailed))
		d.delivered(ep.ID, ev, OutcomeGaveUp, false)
		return d.updateNotice(ctx, ref, recorded+" REMOVE due_shard, due_time, claim_owner, claim_until, next_attempt_time", values)
	}
	values[":state"] = str(string(webhook.DeliveryPending))
	values[":next"] = num(next.UnixNano())
	values[":due"] = str(dueText(next))
	outcome := OutcomeFailed
	if res.Gone() {
		outcome = OutcomeGone
	}
	d.delivered(ep.ID, ev, outcome, false)
	return d.updateNotice(ctx, ref, recorded+", next_attempt_time = :next, due_time = :due REMOVE claim_owner, claim_until", values)
}

// updateNotice writes a notice row the claim holder holds; a claim lost
// meanwhile (another dispatcher took it after it expired) writes nothing.
func (d *Dispatcher) updateNotice(ctx context.Context, ref queueRef, expr string, values map[string]types.AttributeValue) error {
	if values == nil {
		values = map[string]types.AttributeValue{}
	}
	values[":me"] = str(d.o.Owner)
	in := &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       noticeKey(ref),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("claim_owner = :me"),
		ExpressionAttributeValues: values,
	}
	if strings.Contains(expr, "#state") {
		in.ExpressionAttributeNames = map[string]string{"#state": "state"}
	}
	_, err := d.db.UpdateItem(ctx, in)
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("write notice row: %w", err)
	}
	return nil
}
