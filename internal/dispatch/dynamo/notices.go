package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

func noticeKey(ref dispatch.QueueRef) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(deliveryPK(ref.EndpointID, ref.UserID)), "SK": ddbattr.S(noticePrefix + ref.Notice)}
}

// PutNotice is dispatch.Store's: a PutItem of the row, its data and time,
// due now, conditional on there being none.
func (s *Store) PutNotice(ctx context.Context, endpointID string, ev webhook.Event, now time.Time) (bool, error) {
	row := dispatch.Row{EndpointID: endpointID, Event: ev, Notice: true, State: dispatch.DeliveryPending}
	item := rowItem(row)
	item["data"] = ddbattr.S(string(ev.Data))
	item["event_time"] = ddbattr.Int(ev.Time.UnixNano())
	item["due_shard"] = ddbattr.S(dueShard(ddbattr.Text(item, "PK"), rowSK(row)))
	item["due_time"] = ddbattr.S(dueText(now))
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("notify: %w", err)
	}
	return true, nil
}

// ClaimNotice is dispatch.Store's: one conditional UpdateItem.
func (s *Store) ClaimNotice(ctx context.Context, ref dispatch.QueueRef, owner string, now, until time.Time) (webhook.Event, int, bool, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &s.table,
		Key:              noticeKey(ref),
		UpdateExpression: aws.String("SET claim_owner = :me, claim_until = :until"),
		ConditionExpression: aws.String("#state = :pending AND due_time <= :nowText AND " +
			"(attribute_not_exists(claim_until) OR claim_until < :now OR claim_owner = :me)"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": ddbattr.S(owner), ":until": ddbattr.Int(until.UnixNano()), ":now": ddbattr.Int(now.UnixNano()),
			":nowText": ddbattr.S(dueText(now)), ":pending": ddbattr.S(string(dispatch.DeliveryPending)),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return webhook.Event{}, 0, false, nil
	}
	if err != nil {
		return webhook.Event{}, 0, false, fmt.Errorf("claim notice: %w", err)
	}
	item := out.Attributes
	ev := webhook.Event{
		ID: ddbattr.Text(item, "event_id"), Type: ledger.EventType(ddbattr.Text(item, "type")), UserID: ref.UserID,
		Version: ddbattr.IntOf(item, "version"), Time: time.Unix(0, ddbattr.IntOf(item, "event_time")).UTC(),
		Data: []byte(ddbattr.Text(item, "data")),
	}
	return ev, int(ddbattr.IntOf(item, "attempts")), true, nil
}

// WriteNotice is dispatch.Store's: one UpdateItem conditional on the claim.
func (s *Store) WriteNotice(ctx context.Context, ref dispatch.QueueRef, owner string, w dispatch.NoticeWrite) error {
	values := map[string]types.AttributeValue{}
	var expr string
	switch a := w.Attempt; {
	case a != nil:
		values[":a"], values[":status"], values[":err"] = ddbattr.Int(int64(a.Attempts)), ddbattr.Int(int64(a.Status)), ddbattr.S(a.LastErr)
		values[":state"] = ddbattr.S(string(a.State))
		recorded := "SET attempts = :a, last_status_code = :status, last_error = :err, #state = :state"
		if !a.Log.Time.IsZero() {
			values[":attempt"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{attemptItem(a.Log)}}
			values[":nolog"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
			values[":maxlog"] = ddbattr.Int(dispatch.MaxAttemptLog)
			recorded += ", #log = list_append(if_not_exists(#log, :nolog), :attempt)"
		}
		if a.State == dispatch.DeliveryPending {
			values[":next"], values[":due"] = ddbattr.Int(a.Next.UnixNano()), ddbattr.S(dueText(a.Next))
			expr = recorded + ", next_attempt_time = :next, due_time = :due REMOVE claim_owner, claim_until"
		} else {
			expr = recorded + " REMOVE due_shard, due_time, claim_owner, claim_until, next_attempt_time"
		}
	case w.Unindex:
		expr = "REMOVE due_shard, due_time, claim_owner, claim_until"
	case !w.Due.IsZero():
		expr = "SET due_time = :due REMOVE claim_owner, claim_until"
		values[":due"] = ddbattr.S(dueText(w.Due))
	default:
		// Due as it was, for any dispatcher.
		expr = "REMOVE claim_owner, claim_until"
	}
	values[":me"] = ddbattr.S(owner)
	in := &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       noticeKey(ref),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("claim_owner = :me"),
		ExpressionAttributeValues: values,
	}
	logged := w.Attempt != nil && !w.Attempt.Log.Time.IsZero()
	if w.Attempt != nil {
		in.ExpressionAttributeNames = map[string]string{"#state": "state"}
	}
	if logged {
		// The attempt log is kept to dispatch.MaxAttemptLog, as a queue's
		// rows are (rowUpdate).
		in.ExpressionAttributeNames["#log"] = "attempt_log"
		in.ConditionExpression = aws.String("claim_owner = :me AND (attribute_not_exists(#log) OR size(#log) < :maxlog)")
	}
	for {
		_, err := s.db.UpdateItem(ctx, in)
		if isConditionFailed(err) && logged {
			// The claim lost, or the log full: its oldest attempt goes if
			// the claim is still ours, and the write again.
			trimmed, err := s.trimLog(ctx, noticeKey(ref), owner)
			if err != nil || !trimmed {
				return err
			}
			continue
		}
		if err != nil && !isConditionFailed(err) {
			return fmt.Errorf("write notice row: %w", err)
		}
		return nil
	}
}
