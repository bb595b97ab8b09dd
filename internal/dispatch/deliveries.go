package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// deliveriesRead names ListWebhookDeliveries' tokens (their scope's first name).
const deliveriesRead = "ListWebhookDeliveries"

const (
	deliveriesIndex = "deliveries_by_endpoint"
	queuesIndex     = "queues_by_endpoint"
)

// ListDeliveries pages one endpoint's delivery rows, newest event first:
// every user's through the deliveries_by_endpoint index, by event id
// (ULIDs: time order); one user's from its own partition, consistently,
// by version, its notices after its entries' events. States filter.
func (d *Dispatcher) ListDeliveries(ctx context.Context, q webhook.DeliveryQuery) ([]webhook.Delivery, string, error) {
	if q.EndpointID == "" {
		return nil, "", endpointNotFound("")
	}
	if q.UserID != "" {
		if err := ledger.ValidateUserID(q.UserID); err != nil {
			return nil, "", err
		}
	}
	for _, s := range q.States {
		if s != webhook.DeliveryPending && s != webhook.DeliverySucceeded && s != webhook.DeliveryFailed {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter,
				"states: %q is not a delivery state (PENDING, SUCCEEDED, FAILED)", clip(string(s)))
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
	in := d.deliveriesQuery(q.EndpointID, q.UserID, states, size)
	if q.PageToken != "" {
		key, err := d.o.Codec.DecodeKey(q.PageToken, scope...)
		if err != nil {
			return nil, "", err
		}
		in.ExclusiveStartKey = startKey(key, q.UserID == "")
	}
	var items []map[string]types.AttributeValue
	for len(items) <= size {
		out, err := d.db.Query(ctx, in)
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: %w", err)
		}
		items = append(items, out.Items...)
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	next := ""
	if len(items) > size {
		items = items[:size]
		last := items[size-1]
		next = d.o.Codec.EncodeKey(strings.Join([]string{getS(last, "PK"), getS(last, "SK"), getS(last, "event_id")}, "\x00"), scope...)
	}
	out := make([]webhook.Delivery, len(items))
	for i, item := range items {
		out[i] = decodeDelivery(item)
	}
	return out, next, nil
}

func (d *Dispatcher) deliveriesQuery(endpointID, user string, states []webhook.DeliveryState, size int) *dynamodb.QueryInput {
	in := &dynamodb.QueryInput{
		TableName:                 &d.table,
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(size + 1)),
		ExpressionAttributeValues: map[string]types.AttributeValue{},
	}
	if user != "" {
		in.KeyConditionExpression = aws.String("PK = :pk")
		in.ExpressionAttributeValues[":pk"] = str(deliveryPK(endpointID, user))
		in.ConsistentRead = aws.Bool(true)
	} else {
		in.IndexName = aws.String(deliveriesIndex)
		in.KeyConditionExpression = aws.String("delivery_endpoint = :ep")
		in.ExpressionAttributeValues[":ep"] = str(endpointID)
	}
	if len(states) > 0 {
		names := make([]string, len(states))
		for i, s := range states {
			names[i] = fmt.Sprintf(":s%d", i)
			in.ExpressionAttributeValues[names[i]] = str(string(s))
		}
		in.FilterExpression = aws.String("#state IN (" + strings.Join(names, ", ") + ")")
		in.ExpressionAttributeNames = map[string]string{"#state": "state"}
	}
	return in
}

// startKey is the key to read on after, from a token's position: the
// table's key, and the index's for a read of the index.
func startKey(position string, index bool) map[string]types.AttributeValue {
	parts := strings.SplitN(position, "\x00", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	key := map[string]types.AttributeValue{"PK": str(parts[0]), "SK": str(parts[1])}
	if index {
		ep, _, _ := strings.Cut(strings.TrimPrefix(parts[0], "D#"), "#")
		key["delivery_endpoint"] = str(ep)
		key["event_id"] = str(parts[2])
	}
	return key
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
func (d *Dispatcher) Redeliver(ctx context.Context, r webhook.Redelivery) (int64, error) {
	if r.EndpointID == "" {
		return 0, endpointNotFound("")
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
	var start map[string]types.AttributeValue
	for {
		out, err := d.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &d.table,
			IndexName:                 aws.String(queuesIndex),
			KeyConditionExpression:    aws.String("queue_endpoint = :ep"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":ep": str(ep.ID)},
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return total, fmt.Errorf("redeliver: queues of %s: %w", ep.ID, err)
		}
		for _, item := range out.Items {
			n, err := d.redeliverUser(ctx, ep, getS(item, "user_id"), r)
			if err != nil {
				return total, err
			}
			total += n
		}
		if out.LastEvaluatedKey == nil {
			return total, nil
		}
		start = out.LastEvaluatedKey
	}
}

// redeliverUser moves back the queue of ep and user as r asks, and
// returns how many events it will send.
func (d *Dispatcher) redeliverUser(ctx context.Context, ep webhook.Endpoint, user string, r webhook.Redelivery) (int64, error) {
	ref := queueRef{endpointID: ep.ID, userID: user}
	for {
		q, exists, err := d.readQueue(ctx, ref)
		if err != nil {
			return 0, err
		}
		admitFrom := ep.CreateTime
		if exists {
			admitFrom = q.admitFrom
		}
		switch {
		case r.FromVersion > 0:
			admitFrom = time.Unix(0, 0).UTC()
		case !r.StartTime.IsZero() && r.StartTime.Before(admitFrom):
			admitFrom = r.StartTime
		}
		from := admitFrom
		if !r.StartTime.IsZero() {
			from = r.StartTime
		}
		target, last, count, err := d.redeliverySpan(ctx, ep, user, r.FromVersion, from, admitFrom)
		if err != nil || count == 0 {
			return 0, err
		}
		values := map[string]types.AttributeValue{
			":ep": str(ep.ID), ":u": str(user), ":af": num(admitFrom.UnixNano()), ":zero": num(0),
			":shard": str(dueShard(queuePK(ep.ID, user), queueSK)), ":now": str(dueText(d.o.Now())),
			":one": num(1),
		}
		in := &dynamodb.UpdateItemInput{TableName: &d.table, Key: queueKey(ref), ExpressionAttributeValues: values}
		const common = "endpoint_id = :ep, queue_endpoint = :ep, user_id = :u, admit_from = :af, attempts = :zero, " +
			"due_shard = :shard, due_time = :now"
		if exists {
			// A claim holder may have sent events past done that it has
			// not yet written (a group): redo tells it where to start again,
			// so that those after target are sent again too. A queue put
			// off (a retry's wait) is due now, for any dispatcher.
			redo := target
			if q.hasRedo {
				redo = min(redo, q.redo)
			}
			values[":done"], values[":redo"] = num(min(q.done, target)), num(redo)
			values[":rvn"] = num(q.rvn)
			values[":high"] = num(max(q.done, q.resolvedHigh))
			expr := "SET done = :done, redo = :redo, resolved_high = :high, " + common
			if q.claimOwner == waiting {
				expr += ", claim_until = :nowN"
				values[":nowN"] = num(d.o.Now().UnixNano())
			}
			in.UpdateExpression = aws.String(expr + " ADD rvn :one REMOVE last_status_code, last_error, next_attempt_time")
			in.ConditionExpression = aws.String("rvn = :rvn")
		} else {
			values[":done"], values[":w"] = num(target), num(last)
			in.UpdateExpression = aws.String("SET done = :done, wanted = :w, " + common + " ADD rvn :one")
			in.ConditionExpression = aws.String("attribute_not_exists(PK)")
		}
		_, err = d.db.UpdateItem(ctx, in)
		if isConditionFailed(err) {
			continue // another writer in between: read again
		}
		if err != nil {
			return 0, fmt.Errorf("redeliver %s: %w", user, err)
		}
		d.handOver(ref)
		return count, nil
	}
}

// redeliverySpan reads user's entries and finds where a redelivery starts
// (target: done is moved back to it) and the last version, and counts the
// events ep will receive after target: from fromVersion if given, else
// from the first entry created at or after from; admitted from admitFrom.
func (d *Dispatcher) redeliverySpan(ctx context.Context, ep webhook.Endpoint, user string, fromVersion int64, from, admitFrom time.Time) (target, last int64, count int64, err error) {
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
