package dynamo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

const (
	deliveriesIndex = "deliveries_by_endpoint"
	queuesIndex     = "queues_by_endpoint"
)

func versionSK(v int64) string { return fmt.Sprintf("V#%020d", v) }

func deliveryPK(endpointID, user string) string { return "D#" + endpointID + "#" + user }

// rowSK is a delivery row's SK: "V#<version>", or a notice's "N#<event id>".
func rowSK(r dispatch.Row) string {
	if r.Notice {
		return noticePrefix + r.Event.ID
	}
	return versionSK(r.Event.Version)
}

func rowItem(r dispatch.Row) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"PK": ddbattr.S(deliveryPK(r.EndpointID, r.Event.UserID)), "SK": ddbattr.S(rowSK(r)),
		"delivery_endpoint": ddbattr.S(r.EndpointID), "event_id": ddbattr.S(r.Event.ID),
		"endpoint_id": ddbattr.S(r.EndpointID), "user_id": ddbattr.S(r.Event.UserID),
		"version": ddbattr.Int(r.Event.Version), "type": ddbattr.S(string(r.Event.Type)),
		"state": ddbattr.S(string(r.State)), "attempts": ddbattr.Int(int64(r.Attempts)),
		"last_status_code": ddbattr.Int(int64(r.Status)), "last_error": ddbattr.S(r.LastErr),
	}
	if !r.Next.IsZero() {
		item["next_attempt_time"] = ddbattr.Int(r.Next.UnixNano())
	}
	return item
}

// rowUpdate is r's write as an Update: the row's attributes set (its
// next_attempt_time removed when it has none), and r's attempt appended to
// its attempt_log, a list kept to dispatch.MaxAttemptLog by the condition
// that it is shorter (a full log fails the condition: WriteQueue drops its
// oldest attempt, trimLog, and writes again). An Update, not a Put, so
// that the log survives the row's next write, a redelivery's included,
// without a read.
func (s *Store) rowUpdate(r dispatch.Row) *types.Update {
	item := rowItem(r)
	key := map[string]types.AttributeValue{"PK": item["PK"], "SK": item["SK"]}
	delete(item, "PK")
	delete(item, "SK")
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	set := make([]string, 0, len(item)+1)
	for _, name := range sortedNames(item) {
		n := fmt.Sprintf("#a%d", len(names))
		names[n] = name
		values[":"+n[1:]] = item[name]
		set = append(set, n+" = :"+n[1:])
	}
	expr := "SET " + strings.Join(set, ", ")
	cond := ""
	if !r.Attempt.Time.IsZero() {
		names["#log"] = "attempt_log"
		values[":attempt"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{attemptItem(r.Attempt)}}
		values[":nolog"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
		values[":maxlog"] = ddbattr.Int(dispatch.MaxAttemptLog)
		expr += ", #log = list_append(if_not_exists(#log, :nolog), :attempt)"
		cond = "attribute_not_exists(#log) OR size(#log) < :maxlog"
	}
	if _, ok := item["next_attempt_time"]; !ok {
		names["#next"] = "next_attempt_time"
		expr += " REMOVE #next"
	}
	u := &types.Update{
		TableName: &s.table, Key: key, UpdateExpression: aws.String(expr),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}
	if cond != "" {
		u.ConditionExpression = aws.String(cond)
	}
	return u
}

func sortedNames(item map[string]types.AttributeValue) []string {
	names := make([]string, 0, len(item))
	for name := range item {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// attemptItem is an attempt as attempt_log keeps it: t (unix ns), s (HTTP
// status), d (duration, ns) and e (the error, when there is one).
func attemptItem(a dispatch.Attempt) types.AttributeValue {
	m := map[string]types.AttributeValue{
		"t": ddbattr.Int(a.Time.UnixNano()), "s": ddbattr.Int(int64(a.Status)), "d": ddbattr.Int(int64(a.Duration)),
	}
	if a.Error != "" {
		m["e"] = ddbattr.S(a.Error)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// decodeLog reads a row's attempt_log, oldest first.
func decodeLog(item map[string]types.AttributeValue) []dispatch.Attempt {
	l, ok := item["attempt_log"].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	out := make([]dispatch.Attempt, 0, len(l.Value))
	for _, v := range l.Value {
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		out = append(out, dispatch.Attempt{
			Time:     time.Unix(0, ddbattr.IntOf(m.Value, "t")).UTC(),
			Status:   int(ddbattr.IntOf(m.Value, "s")),
			Error:    ddbattr.Text(m.Value, "e"),
			Duration: time.Duration(ddbattr.IntOf(m.Value, "d")),
		})
	}
	return out
}

// trimLog drops the oldest attempt of the row at key if its log is full
// (dispatch.MaxAttemptLog long), making room for the next: only its
// claim holder writes a row, so the log is no longer than that. With
// owner, only while owner holds the row's claim (a notice's); trimmed
// says whether it dropped one.
func (s *Store) trimLog(ctx context.Context, key map[string]types.AttributeValue, owner string) (trimmed bool, err error) {
	cond := "size(#log) >= :maxlog"
	values := map[string]types.AttributeValue{":maxlog": ddbattr.Int(dispatch.MaxAttemptLog)}
	if owner != "" {
		cond += " AND claim_owner = :me"
		values[":me"] = ddbattr.S(owner)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key,
		UpdateExpression:          aws.String("REMOVE #log[0]"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#log": "attempt_log"},
		ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("trim attempt log: %w", err)
	}
	return true, nil
}

func decodeDelivery(item map[string]types.AttributeValue) dispatch.Delivery {
	dl := dispatch.Delivery{
		EndpointID:     ddbattr.Text(item, "endpoint_id"),
		EventID:        ddbattr.Text(item, "event_id"),
		Type:           ledger.EventType(ddbattr.Text(item, "type")),
		UserID:         ddbattr.Text(item, "user_id"),
		Version:        ddbattr.IntOf(item, "version"),
		State:          dispatch.DeliveryState(ddbattr.Text(item, "state")),
		Attempts:       int(ddbattr.IntOf(item, "attempts")),
		LastStatusCode: int(ddbattr.IntOf(item, "last_status_code")),
		LastError:      ddbattr.Text(item, "last_error"),
		Log:            decodeLog(item),
	}
	if n := ddbattr.IntOf(item, "next_attempt_time"); n != 0 && dl.State == dispatch.DeliveryPending {
		dl.NextAttemptTime = time.Unix(0, n).UTC()
	}
	return dl
}

// ListDeliveries is dispatch.Store's: every user's rows through the
// deliveries_by_endpoint index, by event id (ULIDs: time order), the
// position the last row's event id; one user's from its own partition,
// consistently, by version, its notices after its entries' events, the
// position the last row's key.
func (s *Store) ListDeliveries(ctx context.Context, q dispatch.DeliveryQuery, size int, after string) ([]dispatch.Delivery, string, error) {
	in := s.deliveriesQuery(q.EndpointID, q.UserID, q.BelowVersion, q.States, size)
	switch {
	case after != "" && q.UserID == "":
		// Every user's: below the event id (unique on the endpoint).
		in.KeyConditionExpression = aws.String("delivery_endpoint = :ep AND event_id < :after")
		in.ExpressionAttributeValues[":after"] = ddbattr.S(after)
	case after != "":
		in.ExclusiveStartKey = startKey(after)
	}
	var items []map[string]types.AttributeValue
	for len(items) <= size {
		out, err := s.db.Query(ctx, in)
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
		next = ddbattr.Text(last, "event_id")
		if q.UserID != "" {
			next = strings.Join([]string{ddbattr.Text(last, "PK"), ddbattr.Text(last, "SK"), next}, "\x00")
		}
	}
	out := make([]dispatch.Delivery, len(items))
	for i, item := range items {
		out[i] = decodeDelivery(item)
	}
	return out, next, nil
}

func (s *Store) deliveriesQuery(endpointID, user string, below int64, states []dispatch.DeliveryState, size int) *dynamodb.QueryInput {
	in := &dynamodb.QueryInput{
		TableName:                 &s.table,
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(size + 1)),
		ExpressionAttributeValues: map[string]types.AttributeValue{},
	}
	if user != "" {
		in.KeyConditionExpression = aws.String("PK = :pk")
		in.ExpressionAttributeValues[":pk"] = ddbattr.S(deliveryPK(endpointID, user))
		in.ConsistentRead = aws.Bool(true)
		if below > 0 {
			// Notices ("N#...") sort below every version ("V#...").
			in.KeyConditionExpression = aws.String("PK = :pk AND SK < :below")
			in.ExpressionAttributeValues[":below"] = ddbattr.S(versionSK(below))
		}
	} else {
		in.IndexName = aws.String(deliveriesIndex)
		in.KeyConditionExpression = aws.String("delivery_endpoint = :ep")
		in.ExpressionAttributeValues[":ep"] = ddbattr.S(endpointID)
	}
	if len(states) > 0 {
		names := make([]string, len(states))
		for i, s := range states {
			names[i] = fmt.Sprintf(":s%d", i)
			in.ExpressionAttributeValues[names[i]] = ddbattr.S(string(s))
		}
		in.FilterExpression = aws.String("#state IN (" + strings.Join(names, ", ") + ")")
		in.ExpressionAttributeNames = map[string]string{"#state": "state"}
	}
	return in
}

// startKey is the key to read one user's rows on after, from a token's
// position ("PK\x00SK\x00event id").
func startKey(position string) map[string]types.AttributeValue {
	parts := strings.SplitN(position, "\x00", 3)
	for len(parts) < 2 {
		parts = append(parts, "")
	}
	return map[string]types.AttributeValue{"PK": ddbattr.S(parts[0]), "SK": ddbattr.S(parts[1])}
}

// QueueUsers is dispatch.Store's: a Query of the queues_by_endpoint index,
// then of deliveries_by_endpoint, then of the endpoint's packs from since
// (the users sent their events directly have rows or packed events and
// no queue), each user once. The last two read every row of the endpoint
// (its user_id only) and every pack from since (its users only): a
// redelivery to every user is rare, and its cost grows with what is
// kept.
func (s *Store) QueueUsers(ctx context.Context, endpointID string, since time.Time, fn func(user string) error) error {
	seen := map[string]bool{}
	each := func(item map[string]types.AttributeValue) error {
		u := ddbattr.Text(item, "user_id")
		if u == "" || seen[u] {
			return nil
		}
		seen[u] = true
		return fn(u)
	}
	packs := &dynamodb.QueryInput{
		TableName: &s.table, KeyConditionExpression: aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(packPK(endpointID))},
		ProjectionExpression:      aws.String("#users"),
		ExpressionAttributeNames:  map[string]string{"#users": "users"},
	}
	if !since.IsZero() {
		packs.KeyConditionExpression = aws.String("PK = :pk AND SK >= :from")
		packs.ExpressionAttributeValues[":from"] = ddbattr.S(dispatch.PackKeyFrom(since))
	}
	for _, in := range []*dynamodb.QueryInput{
		{
			TableName: &s.table, IndexName: aws.String(queuesIndex),
			KeyConditionExpression:    aws.String("queue_endpoint = :ep"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":ep": ddbattr.S(endpointID)},
		},
		{
			TableName: &s.table, IndexName: aws.String(deliveriesIndex),
			KeyConditionExpression:    aws.String("delivery_endpoint = :ep"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":ep": ddbattr.S(endpointID)},
			ProjectionExpression:      aws.String("user_id"),
		},
		packs,
	} {
		for {
			out, err := s.db.Query(ctx, in)
			if err != nil {
				return fmt.Errorf("redeliver: users of %s: %w", endpointID, err)
			}
			for _, item := range out.Items {
				if err := each(item); err != nil {
					return err
				}
				if ss, ok := item["users"].(*types.AttributeValueMemberSS); ok {
					for _, u := range ss.Value {
						if err := each(map[string]types.AttributeValue{"user_id": ddbattr.S(u)}); err != nil {
							return err
						}
					}
				}
			}
			if out.LastEvaluatedKey == nil {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
	return nil
}

// Queued is dispatch.Store's: a Query of the queues_by_endpoint index, by
// user.
func (s *Store) Queued(ctx context.Context, endpointID, after string, fn func(user string) (bool, error)) error {
	in := &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(queuesIndex),
		KeyConditionExpression:    aws.String("queue_endpoint = :ep"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ep": ddbattr.S(endpointID)},
	}
	if after != "" {
		in.KeyConditionExpression = aws.String("queue_endpoint = :ep AND user_id > :after")
		in.ExpressionAttributeValues[":after"] = ddbattr.S(after)
	}
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return fmt.Errorf("queues of %s: %w", endpointID, err)
		}
		for _, item := range out.Items {
			if more, err := fn(ddbattr.Text(item, "user_id")); err != nil || !more {
				return err
			}
		}
		if out.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// MoveBack is dispatch.Store's: one conditional UpdateItem.
func (s *Store) MoveBack(ctx context.Context, ref dispatch.QueueRef, q dispatch.Queue, exists bool, m dispatch.MoveBack) error {
	values := map[string]types.AttributeValue{
		":ep": ddbattr.S(ref.EndpointID), ":u": ddbattr.S(ref.UserID), ":af": ddbattr.Int(m.AdmitFrom.UnixNano()), ":zero": ddbattr.Int(0),
		":shard": ddbattr.S(dueShard(queuePK(ref.EndpointID, ref.UserID), queueSK)), ":now": ddbattr.S(dueText(m.Now)),
		":one": ddbattr.Int(1),
	}
	in := &dynamodb.UpdateItemInput{TableName: &s.table, Key: queueKey(ref), ExpressionAttributeValues: values}
	const common = "endpoint_id = :ep, queue_endpoint = :ep, user_id = :u, admit_from = :af, attempts = :zero, " +
		"due_shard = :shard, due_time = :now"
	if exists {
		values[":done"], values[":redo"] = ddbattr.Int(m.Done), ddbattr.Int(m.Redo)
		values[":rvn"] = ddbattr.Int(q.RVN)
		values[":high"] = ddbattr.Int(m.ResolvedHigh)
		expr := "SET done = :done, redo = :redo, resolved_high = :high, " + common
		if q.ClaimOwner == dispatch.Waiting {
			expr += ", claim_until = :nowN"
			values[":nowN"] = ddbattr.Int(m.Now.UnixNano())
		}
		in.UpdateExpression = aws.String(expr + " ADD rvn :one REMOVE last_status_code, last_error, next_attempt_time")
		in.ConditionExpression = aws.String("rvn = :rvn")
	} else {
		values[":done"], values[":w"], values[":high"] = ddbattr.Int(m.Done), ddbattr.Int(m.Wanted), ddbattr.Int(m.ResolvedHigh)
		in.UpdateExpression = aws.String("SET done = :done, wanted = :w, resolved_high = :high, " + common + " ADD rvn :one")
		in.ConditionExpression = aws.String("attribute_not_exists(PK)")
	}
	_, err := s.db.UpdateItem(ctx, in)
	if isConditionFailed(err) {
		return dispatch.ErrQueueChanged
	}
	if err != nil {
		return fmt.Errorf("redeliver %s: %w", ref.UserID, err)
	}
	return nil
}
