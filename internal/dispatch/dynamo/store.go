package dynamo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/throttle"
)

// DB is the part of the DynamoDB client the store uses.
type DB interface {
	EndpointsAPI
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// Store is dispatch.Store on the webhooks table (doc.go).
type Store struct {
	*Endpoints
	db    DB
	table string
}

var _ dispatch.Store = (*Store)(nil)

// New returns the store of table; now nil means time.Now (it times the
// endpoints' creation and rotations).
func New(db DB, table string, now func() time.Time) *Store {
	return &Store{Endpoints: NewEndpoints(db, table, now), db: db, table: table}
}

// DueShards is the number of partitions of the "due" index. It is fixed:
// every dispatcher must read the shards the others write.
const DueShards = 16

const (
	queueSK      = "Q"
	noticePrefix = "N#"
	dueIndex     = "due"
	// maxDuePerShard bounds the candidates one read of a shard takes.
	maxDuePerShard = 200
)

func queuePK(endpointID, user string) string { return "Q#" + endpointID + "#" + user }

func queueKey(ref dispatch.QueueRef) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(queuePK(ref.EndpointID, ref.UserID)), "SK": ddbattr.S(queueSK)}
}

// refOfKey reads a queue's or a notice row's key, as the "due" index
// returns it. Endpoint ids are ULIDs, without "#": the user is the rest.
func refOfKey(pk, sk string) (dispatch.QueueRef, bool) {
	kind, rest, ok := strings.Cut(pk, "#")
	if !ok {
		return dispatch.QueueRef{}, false
	}
	ep, user, ok := strings.Cut(rest, "#")
	if !ok {
		return dispatch.QueueRef{}, false
	}
	switch {
	case kind == "Q" && sk == queueSK:
		return dispatch.QueueRef{EndpointID: ep, UserID: user}, true
	case kind == "D" && strings.HasPrefix(sk, noticePrefix):
		return dispatch.QueueRef{EndpointID: ep, UserID: user, Notice: strings.TrimPrefix(sk, noticePrefix)}, true
	}
	return dispatch.QueueRef{}, false
}

// dueShard spreads due queues over the index's partitions by a hash of
// the key.
func dueShard(pk, sk string) string {
	h := fnv.New32a()
	h.Write([]byte(pk))
	h.Write([]byte(sk))
	return strconv.Itoa(int(h.Sum32() % DueShards))
}

// dueText is a due_time: fixed-width UTC, so that text order is time order.
func dueText(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }

func decodeQueue(ref dispatch.QueueRef, item map[string]types.AttributeValue) dispatch.Queue {
	_, hasRedo := item["redo"]
	return dispatch.Queue{
		Ref:        ref,
		Wanted:     ddbattr.IntOf(item, "wanted"),
		Done:       ddbattr.IntOf(item, "done"),
		Attempts:   int(ddbattr.IntOf(item, "attempts")),
		AdmitFrom:  time.Unix(0, ddbattr.IntOf(item, "admit_from")).UTC(),
		ClaimOwner: ddbattr.Text(item, "claim_owner"),
		ClaimUntil: time.Unix(0, ddbattr.IntOf(item, "claim_until")),
		RVN:        ddbattr.IntOf(item, "rvn"),
		Redo:       ddbattr.IntOf(item, "redo"),
		HasRedo:    hasRedo,

		ResolvedHigh: ddbattr.IntOf(item, "resolved_high"),
	}
}

func isConditionFailed(err error) bool {
	var failed *types.ConditionalCheckFailedException
	return errors.As(err, &failed)
}

// MarkWanted is dispatch.Store's: one UpdateItem, conditional on there
// being no queue or one wanting less.
func (s *Store) MarkWanted(ctx context.Context, ref dispatch.QueueRef, m dispatch.Mark) (q dispatch.Queue, claimed, ok bool, err error) {
	pk := queuePK(ref.EndpointID, ref.UserID)
	values := map[string]types.AttributeValue{
		":w": ddbattr.Int(m.Last), ":d": ddbattr.Int(m.First - 1), ":ep": ddbattr.S(ref.EndpointID), ":u": ddbattr.S(ref.UserID),
		":af": ddbattr.Int(m.AdmitFrom.UnixNano()), ":zero": ddbattr.Int(0), ":shard": ddbattr.S(dueShard(pk, queueSK)),
	}
	expr := "SET wanted = :w, done = if_not_exists(done, :d), endpoint_id = :ep, queue_endpoint = :ep, " +
		"user_id = :u, admit_from = if_not_exists(admit_from, :af), attempts = if_not_exists(attempts, :zero), " +
		"due_shard = :shard, rvn = if_not_exists(rvn, :zero)"
	if m.Claim != nil {
		// An idle queue has none of the three: it is claimed, and due when
		// the claim ends (the "due" index finds it only if this dispatcher
		// dies). A queue with a due_time (a redelivery's) keeps it.
		expr += ", claim_owner = if_not_exists(claim_owner, :me), claim_until = if_not_exists(claim_until, :until), " +
			"due_time = if_not_exists(due_time, :untilText)"
		values[":me"], values[":until"], values[":untilText"] = ddbattr.S(m.Claim.Owner), ddbattr.Int(m.Claim.Until.UnixNano()), ddbattr.S(dueText(m.Claim.Until))
	} else {
		expr += ", due_time = if_not_exists(due_time, :now)"
		values[":now"] = ddbattr.S(dueText(m.Now))
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       queueKey(ref),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("attribute_not_exists(PK) OR wanted < :w"),
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return dispatch.Queue{}, false, false, nil
	}
	if err != nil {
		return dispatch.Queue{}, false, false, fmt.Errorf("mark queue %s: %w", pk, err)
	}
	q = decodeQueue(ref, out.Attributes)
	// Ours only if this write set all three: a claim_until to the
	// nanosecond of this write, and a due_time of its own (not a
	// redelivery's, which wants the "due" index to find it).
	claimed = m.Claim != nil && q.ClaimOwner == m.Claim.Owner && q.ClaimUntil.Equal(time.Unix(0, m.Claim.Until.UnixNano())) &&
		ddbattr.Text(out.Attributes, "due_time") == dueText(m.Claim.Until)
	return q, claimed, true, nil
}

// Claim is dispatch.Store's: one conditional UpdateItem.
func (s *Store) Claim(ctx context.Context, ref dispatch.QueueRef, owner string, now, until time.Time) (dispatch.Queue, bool, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &s.table,
		Key:              queueKey(ref),
		UpdateExpression: aws.String("SET claim_owner = :me, claim_until = :until, due_time = :untilText ADD rvn :one"),
		ConditionExpression: aws.String("attribute_exists(PK) AND done < wanted AND " +
			"(attribute_not_exists(claim_until) OR claim_until < :now OR claim_owner = :me) AND " +
			"(attribute_not_exists(due_time) OR due_time <= :nowText)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": ddbattr.S(owner), ":until": ddbattr.Int(until.UnixNano()), ":one": ddbattr.Int(1),
			":now": ddbattr.Int(now.UnixNano()), ":nowText": ddbattr.S(dueText(now)), ":untilText": ddbattr.S(dueText(until)),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return dispatch.Queue{}, false, nil
	}
	if err != nil {
		return dispatch.Queue{}, false, fmt.Errorf("claim queue: %w", err)
	}
	return decodeQueue(ref, out.Attributes), true, nil
}

// ReadQueue is dispatch.Store's: one consistent GetItem.
func (s *Store) ReadQueue(ctx context.Context, ref dispatch.QueueRef) (dispatch.Queue, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: queueKey(ref), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return dispatch.Queue{}, false, fmt.Errorf("read queue: %w", err)
	}
	if out.Item == nil {
		return dispatch.Queue{}, false, nil
	}
	return decodeQueue(ref, out.Item), true, nil
}

// ReadQueues is dispatch.Store's: BatchGetItem, consistent, 100 keys a
// call, four calls at once (inChunks), what DynamoDB left unprocessed
// asked again (untilProcessed).
func (s *Store) ReadQueues(ctx context.Context, refs []dispatch.QueueRef) (map[dispatch.QueueRef]dispatch.Queue, error) {
	out := map[dispatch.QueueRef]dispatch.Queue{}
	var mu sync.Mutex
	err := inChunks(len(refs), maxBatchGet, func(from, to int) error {
		keys := make([]map[string]types.AttributeValue, 0, to-from)
		for _, ref := range refs[from:to] {
			keys = append(keys, queueKey(ref))
		}
		return untilProcessed(ctx, keys, func(keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: keys, ConsistentRead: aws.Bool(true)},
			}})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			for _, item := range res.Responses[s.table] {
				if ref, ok := refOfKey(ddbattr.Text(item, "PK"), ddbattr.Text(item, "SK")); ok {
					out[ref] = decodeQueue(ref, item)
				}
			}
			return res.UnprocessedKeys[s.table].Keys, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read queues: %w", err)
	}
	return out, nil
}

// PutRows is dispatch.Store's: BatchWriteItem, 25 rows a call, four calls
// at once (inChunks), what DynamoDB left unprocessed written again
// (untilProcessed). Each row is put whole, not appended to: a batch write
// is no transaction, and on DynamoDB Local a row put so costs a quarter to
// a sixth of a row updated in a transaction (on DynamoDB, one write unit a
// KB instead of two). A row already there (an event sent directly again
// after a crash, before its batch's checkpoint) keeps only this attempt.
func (s *Store) PutRows(ctx context.Context, rows []dispatch.Row) error {
	items := make([]map[string]types.AttributeValue, len(rows))
	for i, r := range rows {
		items[i] = rowItem(r)
		if !r.Attempt.Time.IsZero() {
			items[i]["attempt_log"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{attemptItem(r.Attempt)}}
		}
	}
	if err := s.putAll(ctx, items); err != nil {
		return fmt.Errorf("put delivery rows: %w", err)
	}
	return nil
}

// putAll puts items whole, maxBatchWrite a BatchWriteItem, four calls at
// once, each until DynamoDB has processed all of it.
func (s *Store) putAll(ctx context.Context, items []map[string]types.AttributeValue) error {
	return inChunks(len(items), maxBatchWrite, func(from, to int) error {
		reqs := make([]types.WriteRequest, 0, to-from)
		for _, item := range items[from:to] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		}
		return untilProcessed(ctx, reqs, func(reqs []types.WriteRequest) ([]types.WriteRequest, error) {
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.table: reqs}})
			if err != nil {
				return nil, err
			}
			return out.UnprocessedItems[s.table], nil
		})
	})
}

// untilProcessed calls call with items, then with what it answers
// DynamoDB left unprocessed, after a back-off each time, until nothing is
// left. A call DynamoDB throttles as a whole is made again the same way,
// up to maxThrottledWrites times; any other error ends it.
func untilProcessed[T any](ctx context.Context, items []T, call func([]T) (unprocessed []T, err error)) error {
	for tries := 0; len(items) > 0; tries++ {
		if tries > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(throttleBackoff(min(tries, maxThrottledWrites))):
			}
		}
		rest, err := call(items)
		switch {
		case throttle.Throttled(err) && tries < maxThrottledWrites:
			continue // all of it again, after the back-off
		case err != nil:
			return err
		}
		items = rest
	}
	return nil
}

// inChunks calls fn with each chunk [from, to) of n, at most size long,
// four at once, and returns their errors joined.
func inChunks(n, size int, fn func(from, to int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		limit = make(chan struct{}, 4)
	)
	for from := 0; from < n; from += size {
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			if err := fn(from, min(from+size, n)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// The most keys a BatchGetItem takes, and items a BatchWriteItem.
const (
	maxBatchGet   = 100
	maxBatchWrite = 25
)

// WriteQueue is dispatch.Store's: an UpdateItem of the queue alone (a
// DeleteItem for a release), or a TransactWriteItems of the queue, the
// rows and the packs, the queue first, so that done never passes an
// event whose row or pack is not written. A write DynamoDB throttles or cancels for a conflict with
// another write under way (a mark of the queue) is tried again here, the
// claim still held; a row whose attempt log is full loses its oldest
// attempt, and the write goes again. ErrQueueChanged: the queue's
// condition failed.
func (s *Store) WriteQueue(ctx context.Context, q dispatch.Queue, rows []dispatch.Row, w dispatch.QueueWrite) error {
	queue := s.queueWrite(q, w)
	// Each pack a new item, its key made once: a write tried again here
	// writes it once.
	packs := make([]map[string]types.AttributeValue, 0, len(w.Packs))
	for _, p := range w.Packs {
		if len(p.Events) > 0 {
			packs = append(packs, packItem(p))
		}
	}
	for conflicts, throttles, trims := 0, 0, 0; ; {
		var err error
		switch {
		case len(rows) == 0 && len(packs) == 0 && queue.Delete != nil:
			d := queue.Delete
			_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: d.TableName, Key: d.Key, ConditionExpression: d.ConditionExpression,
				ExpressionAttributeValues: d.ExpressionAttributeValues,
			})
		case len(rows) == 0 && len(packs) == 0:
			u := queue.Update
			_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
				ConditionExpression: u.ConditionExpression, ExpressionAttributeValues: u.ExpressionAttributeValues,
			})
		default:
			items := make([]types.TransactWriteItem, 0, len(rows)+len(packs)+1)
			items = append(items, *queue)
			for _, r := range rows {
				items = append(items, types.TransactWriteItem{Update: s.rowUpdate(r)})
			}
			for _, p := range packs {
				items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: p}})
			}
			_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		}
		failed, conflict, full := writeFailure(err)
		switch {
		case err == nil:
			return nil
		case len(full) > 0 && !failed && trims < len(rows)+1:
			// A row's attempt log is full: its oldest attempt goes, and
			// the write again (nothing of it was written).
			trims++
			for _, i := range full {
				if i < 1 || i > len(rows) {
					continue
				}
				r := rowItem(rows[i-1])
				if _, err := s.trimLog(ctx, map[string]types.AttributeValue{"PK": r["PK"], "SK": r["SK"]}, ""); err != nil {
					return err
				}
			}
			continue
		case throttle.Throttled(err) && throttles < maxThrottledWrites:
			// The queue's or the rows' partition is over its capacity:
			// back off and write again, still holding the claim (given
			// up, the queue would wait for the claim to end).
			throttles++
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(throttleBackoff(throttles)):
			}
			continue
		case conflict && conflicts < 10:
			// DynamoDB cancels a transaction that meets another write of
			// the queue (a mark) under way: try again shortly.
			conflicts++
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(conflicts) * 10 * time.Millisecond):
			}
			continue
		case failed:
			return dispatch.ErrQueueChanged
		}
		return fmt.Errorf("write queue: %w", err)
	}
}

// maxThrottledWrites bounds the tries of a queue's write that DynamoDB
// throttles: with throttleBackoff, about 25 s, within the claim.
const maxThrottledWrites = 12

// throttleBackoff is the wait before the n-th try again of a throttled
// write: 50 ms doubling to 3.2 s, with jitter so that the queues of one
// partition do not come back together.
func throttleBackoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(n-1, 6)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// writeFailure says whether err is the queue's condition failing (alone
// or in a transaction, where the queue is the first item), or a
// transaction conflict, which is worth trying again, and which items
// after the first (rows whose attempt log is full) failed their condition.
func writeFailure(err error) (conditionFailed, conflict bool, full []int) {
	if err == nil {
		return false, false, nil
	}
	if isConditionFailed(err) {
		return true, false, nil
	}
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) {
		return false, false, nil
	}
	for i, r := range cancelled.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			if i == 0 {
				return true, false, nil
			}
			full = append(full, i)
		case "TransactionConflict":
			conflict = true
		}
	}
	return false, conflict, full
}

// queueWrite is w as a write of q: a Delete for a release (conditional
// on q's record version and on wanting no more than w.Done), else an
// Update.
func (s *Store) queueWrite(q dispatch.Queue, w dispatch.QueueWrite) *types.TransactWriteItem {
	if w.After == dispatch.Release {
		return &types.TransactWriteItem{Delete: &types.Delete{
			TableName: &s.table, Key: queueKey(q.Ref),
			ConditionExpression:       aws.String("rvn = :rvn AND wanted <= :done"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":rvn": ddbattr.Int(q.RVN), ":done": ddbattr.Int(w.Done)},
		}}
	}
	u := s.queueUpdate(q, w)
	return &types.TransactWriteItem{Update: &types.Update{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression: u.ConditionExpression, ExpressionAttributeValues: u.ExpressionAttributeValues,
	}}
}

// queueUpdate is w as an UpdateItem of q.
func (s *Store) queueUpdate(q dispatch.Queue, w dispatch.QueueWrite) *dynamodb.UpdateItemInput {
	set := []string{"done = :done"}
	var remove []string
	values := map[string]types.AttributeValue{":done": ddbattr.Int(w.Done), ":rvn": ddbattr.Int(q.RVN), ":one": ddbattr.Int(1)}
	switch {
	case w.Failed != nil:
		set = append(set, "attempts = :a", "last_status_code = :status", "last_error = :err", "next_attempt_time = :next")
		values[":a"] = ddbattr.Int(int64(w.Failed.Attempts))
		values[":status"] = ddbattr.Int(int64(w.Failed.Status))
		values[":err"] = ddbattr.S(w.Failed.LastErr)
		values[":next"] = ddbattr.Int(w.Failed.Next.UnixNano())
	case w.Done > q.Done:
		set = append(set, "attempts = :zero")
		remove = append(remove, "last_status_code", "last_error", "next_attempt_time")
		values[":zero"] = ddbattr.Int(0)
	}
	if q.HasRedo {
		remove = append(remove, "redo")
	}
	cond := "rvn = :rvn"
	switch w.After {
	case dispatch.KeepClaim, dispatch.PutOff:
		set = append(set, "claim_owner = :owner", "claim_until = :until", "due_time = :untilText")
		values[":owner"], values[":until"], values[":untilText"] = ddbattr.S(w.Claim.Owner), ddbattr.Int(w.Claim.Until.UnixNano()), ddbattr.S(dueText(w.Claim.Until))
	case dispatch.Release, dispatch.Drop:
		remove = append(remove, "due_shard", "due_time", "claim_owner", "claim_until")
		if w.After == dispatch.Release {
			cond += " AND wanted <= :done"
		}
	}
	expr := "SET " + strings.Join(set, ", ") + " ADD rvn :one"
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       queueKey(q.Ref),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: values,
	}
}

// Due is dispatch.Store's: a Query of every shard of the "due" index.
func (s *Store) Due(ctx context.Context, at time.Time) ([]dispatch.QueueRef, error) {
	now := dueText(at)
	var refs []dispatch.QueueRef
	for shard := range DueShards {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.table,
			IndexName:              aws.String(dueIndex),
			KeyConditionExpression: aws.String("due_shard = :s AND due_time <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":s": ddbattr.S(strconv.Itoa(shard)), ":now": ddbattr.S(now),
			},
			Limit: aws.Int32(maxDuePerShard),
		})
		if err != nil {
			return refs, fmt.Errorf("query due shard %d: %w", shard, err)
		}
		for _, item := range out.Items {
			if ref, ok := refOfKey(ddbattr.Text(item, "PK"), ddbattr.Text(item, "SK")); ok {
				refs = append(refs, ref)
			}
		}
	}
	return refs, nil
}
