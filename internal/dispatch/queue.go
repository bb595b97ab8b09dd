package dispatch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/throttle"
)

// queue is one endpoint's queue of one user's events, as read.
type queue struct {
	ref        queueRef
	wanted     int64
	done       int64
	attempts   int // the head's, so far
	admitFrom  time.Time
	claimOwner string
	claimUntil time.Time
	rvn        int64
	// redo is where the latest redelivery asked the queue to start again
	// (done moved back to at most it); hasRedo says there is one the claim
	// holder has not taken into account yet.
	redo    int64
	hasRedo bool
	// resolvedHigh is the highest done a redelivery moved back from: an
	// event at or below it was resolved before, so its attempt now is a
	// redelivery, counted apart from the first deliveries' lag.
	resolvedHigh int64
}

const queueSK = "Q"

// waiting is the claim_owner of a queue put off until its claim_until (a
// failed head's next attempt, a disabled endpoint, a stop): no dispatcher
// holds it, but it is not idle either, so that marking it wanted does not
// take it before its time (markWanted takes only a queue without any
// claim_owner), and any dispatcher may claim it once claim_until passes.
const waiting = "(waiting)"

func queuePK(endpointID, user string) string { return "Q#" + endpointID + "#" + user }

func queueKey(ref queueRef) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": str(queuePK(ref.endpointID, ref.userID)), "SK": str(queueSK)}
}

// refOfKey reads a queue's or a notice row's key, as the "due" index
// returns it. Endpoint ids are ULIDs, without "#": the user is the rest.
func refOfKey(pk, sk string) (queueRef, bool) {
	kind, rest, ok := strings.Cut(pk, "#")
	if !ok {
		return queueRef{}, false
	}
	ep, user, ok := strings.Cut(rest, "#")
	if !ok {
		return queueRef{}, false
	}
	switch {
	case kind == "Q" && sk == queueSK:
		return queueRef{endpointID: ep, userID: user}, true
	case kind == "D" && strings.HasPrefix(sk, noticePrefix):
		return queueRef{endpointID: ep, userID: user, notice: sk}, true
	}
	return queueRef{}, false
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

func decodeQueue(ref queueRef, item map[string]types.AttributeValue) queue {
	_, hasRedo := item["redo"]
	return queue{
		ref:        ref,
		wanted:     getN(item, "wanted"),
		done:       getN(item, "done"),
		attempts:   int(getN(item, "attempts")),
		admitFrom:  time.Unix(0, getN(item, "admit_from")).UTC(),
		claimOwner: getS(item, "claim_owner"),
		claimUntil: time.Unix(0, getN(item, "claim_until")),
		rvn:        getN(item, "rvn"),
		redo:       getN(item, "redo"),
		hasRedo:    hasRedo,

		resolvedHigh: getN(item, "resolved_high"),
	}
}

func isConditionFailed(err error) bool {
	var failed *types.ConditionalCheckFailedException
	return errors.As(err, &failed)
}

// markWanted records on the queue of ref that versions up to last are
// wanted, making the queue if there is none (done just before first). A
// queue already wanting as much is left alone. A queue that was idle
// becomes due now; one waiting for a retry keeps its due_time.
//
// With take, the same write also claims the queue for this dispatcher if
// it was idle (no claim_owner at all: never claimed, or released with
// nothing wanted): claimed says it did, and q is the queue as written, so
// that delivery starts without a claim of its own. A queue someone holds
// or one put off (waiting) is left to its holder or to its due_time.
//
// The mark does not move rvn: only wanted changes, and a claim holder's
// writes check wanted where it matters (a release requires wanted <= done),
// so that marking a queue under delivery does not make its holder read it
// again.
func (d *Dispatcher) markWanted(ctx context.Context, ref queueRef, first, last int64, admitFrom time.Time, take bool) (q queue, claimed bool, err error) {
	pk := queuePK(ref.endpointID, ref.userID)
	now := d.o.Now()
	until := now.Add(d.o.ClaimTTL)
	values := map[string]types.AttributeValue{
		":w": num(last), ":d": num(first - 1), ":ep": str(ref.endpointID), ":u": str(ref.userID),
		":af": num(admitFrom.UnixNano()), ":zero": num(0), ":shard": str(dueShard(pk, queueSK)),
	}
	expr := "SET wanted = :w, done = if_not_exists(done, :d), endpoint_id = :ep, queue_endpoint = :ep, " +
		"user_id = :u, admit_from = if_not_exists(admit_from, :af), attempts = if_not_exists(attempts, :zero), " +
		"due_shard = :shard, rvn = if_not_exists(rvn, :zero)"
	if take {
		// An idle queue has none of the three: it is claimed, and due when
		// the claim ends (the "due" index finds it only if this dispatcher
		// dies). A queue with a due_time (a redelivery's) keeps it.
		expr += ", claim_owner = if_not_exists(claim_owner, :me), claim_until = if_not_exists(claim_until, :until), " +
			"due_time = if_not_exists(due_time, :untilText)"
		values[":me"], values[":until"], values[":untilText"] = str(d.o.Owner), num(until.UnixNano()), str(dueText(until))
	} else {
		expr += ", due_time = if_not_exists(due_time, :now)"
		values[":now"] = str(dueText(now))
	}
	out, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       queueKey(ref),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("attribute_not_exists(PK) OR wanted < :w"),
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return queue{}, false, nil
	}
	if err != nil {
		return queue{}, false, fmt.Errorf("mark queue %s: %w", pk, err)
	}
	q = decodeQueue(ref, out.Attributes)
	// Ours only if this write set all three: a claim_until to the
	// nanosecond of this write, and a due_time of its own (not a
	// redelivery's, which wants the "due" index to find it).
	claimed = take && q.claimOwner == d.o.Owner && q.claimUntil.Equal(time.Unix(0, until.UnixNano())) &&
		getS(out.Attributes, "due_time") == dueText(until)
	return q, claimed, nil
}

// claim takes the queue of ref for this dispatcher until now+ClaimTTL, if
// it is due, has events waiting and no one else holds it. ok is false
// when it may not be taken. The queue's due_time moves to the claim's
// end: other dispatchers find it in the index again only if the claim
// expires, not at every read while this one delivers.
func (d *Dispatcher) claim(ctx context.Context, ref queueRef) (q queue, ok bool, err error) {
	now := d.o.Now()
	out, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &d.table,
		Key:              queueKey(ref),
		UpdateExpression: aws.String("SET claim_owner = :me, claim_until = :until, due_time = :untilText ADD rvn :one"),
		ConditionExpression: aws.String("attribute_exists(PK) AND done < wanted AND " +
			"(attribute_not_exists(claim_until) OR claim_until < :now OR claim_owner = :me) AND " +
			"(attribute_not_exists(due_time) OR due_time <= :nowText)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": str(d.o.Owner), ":until": num(now.Add(d.o.ClaimTTL).UnixNano()), ":one": num(1),
			":now": num(now.UnixNano()), ":nowText": str(dueText(now)), ":untilText": str(dueText(now.Add(d.o.ClaimTTL))),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return queue{}, false, nil
	}
	if err != nil {
		return queue{}, false, fmt.Errorf("claim queue: %w", err)
	}
	return decodeQueue(ref, out.Attributes), true, nil
}

// readQueue reads a queue consistently; ok is false if there is none.
func (d *Dispatcher) readQueue(ctx context.Context, ref queueRef) (queue, bool, error) {
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &d.table, Key: queueKey(ref), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return queue{}, false, fmt.Errorf("read queue: %w", err)
	}
	if out.Item == nil {
		return queue{}, false, nil
	}
	return decodeQueue(ref, out.Item), true, nil
}

// errClaimLost ends a delivery whose queue another dispatcher took: the
// claim expired and another holds it, or the queue is gone.
var errClaimLost = errors.New("queue claim lost")

// errRedelivered ends a write that found its queue moved by a redelivery
// under a claim still this dispatcher's: the queue as read is returned
// with it, to go on from.
var errRedelivered = errors.New("queue moved by a redelivery")

// holdAfter is what becomes of the claim after a holder's write.
type holdAfter int

const (
	// keepClaim renews the claim: more events are to be sent.
	keepClaim holdAfter = iota
	// putOff ends the claim until a time (queueWrite.until), the queue
	// staying due then: a failed head's next attempt, a disabled
	// endpoint, a stop.
	putOff
	// release ends the claim of a queue with nothing more wanted: it
	// leaves the "due" index. Should wanted have risen meanwhile, the
	// write keeps the claim instead.
	release
	// drop takes the queue of a deleted endpoint out of the "due" index.
	drop
)

// queueWrite is one write of the claim holder to its queue: done moved to
// done (the events up to it answered 2xx, given up or skipped), the
// head's failed attempt if there is one, and what becomes of the claim.
type queueWrite struct {
	done   int64
	after  holdAfter
	until  time.Time      // putOff's end
	failed *failedAttempt // the head's attempt that got no 2xx
}

// failedAttempt is what the queue keeps of its head's last attempt.
type failedAttempt struct {
	attempts int
	status   int
	lastErr  string
	next     time.Time
}

// write puts the rows (the delivery rows of the events w resolves, and
// of a failed head) and w on the record in one write: an UpdateItem of the
// queue alone, or a TransactWriteItems of the rows and the queue, so that
// done never passes an event whose row is not written. The write is
// conditional on the record version q was read at (claims and
// redeliveries move it; a mark of wanted does not). When it fails, the
// queue is read again: a claim that is no longer this dispatcher's is
// errClaimLost, a moved record version (a redelivery) errRedelivered with
// the queue as read; a raised wanted alone is written again, keeping the
// claim if w released it.
func (d *Dispatcher) write(ctx context.Context, q queue, rows []deliveryRow, w queueWrite) (queue, error) {
	for conflicts, throttles := 0, 0; ; {
		if w.after == release && w.done < q.wanted {
			w.after = keepClaim
		}
		update, next := d.queueUpdate(q, w)
		var err error
		if len(rows) == 0 {
			_, err = d.db.UpdateItem(ctx, update)
		} else {
			items := make([]types.TransactWriteItem, 0, len(rows)+1)
			items = append(items, types.TransactWriteItem{Update: &types.Update{
				TableName: update.TableName, Key: update.Key, UpdateExpression: update.UpdateExpression,
				ConditionExpression: update.ConditionExpression, ExpressionAttributeValues: update.ExpressionAttributeValues,
			}})
			for _, r := range rows {
				items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &d.table, Item: r.item()}})
			}
			_, err = d.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		}
		failed, conflict := writeFailure(err)
		switch {
		case err == nil:
			return next, nil
		case throttle.Throttled(err) && throttles < maxThrottledWrites:
			// The queue's or the rows' partition is over its capacity:
			// back off and write again, still holding the claim (given
			// up, the queue would wait for the claim to end).
			throttles++
			select {
			case <-ctx.Done():
				return q, ctx.Err()
			case <-time.After(throttleBackoff(throttles)):
			}
			continue
		case conflict && conflicts < 10:
			// DynamoDB cancels a transaction that meets another write of
			// the queue (a mark) under way: try again shortly.
			conflicts++
			select {
			case <-ctx.Done():
				return q, ctx.Err()
			case <-time.After(time.Duration(conflicts) * 10 * time.Millisecond):
			}
			continue
		case !failed:
			return q, fmt.Errorf("write queue: %w", err)
		}
		now, ok, err := d.readQueue(ctx, q.ref)
		switch {
		case err != nil:
			return q, err
		case !ok || now.claimOwner != d.o.Owner:
			return q, errClaimLost
		case now.rvn != q.rvn:
			return now, errRedelivered
		}
		q.wanted = now.wanted
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
// transaction conflict, which is worth trying again.
func writeFailure(err error) (conditionFailed, conflict bool) {
	if err == nil {
		return false, false
	}
	if isConditionFailed(err) {
		return true, false
	}
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) {
		return false, false
	}
	for i, r := range cancelled.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			if i == 0 {
				return true, false
			}
		case "TransactionConflict":
			conflict = true
		}
	}
	return false, conflict
}

// queueUpdate is w as an UpdateItem of q, and q as it will be once
// written.
func (d *Dispatcher) queueUpdate(q queue, w queueWrite) (*dynamodb.UpdateItemInput, queue) {
	set := []string{"done = :done"}
	var remove []string
	values := map[string]types.AttributeValue{":done": num(w.done), ":rvn": num(q.rvn), ":one": num(1)}
	next := q
	next.done, next.rvn, next.hasRedo = w.done, q.rvn+1, false
	switch {
	case w.failed != nil:
		set = append(set, "attempts = :a", "last_status_code = :status", "last_error = :err", "next_attempt_time = :next")
		values[":a"] = num(int64(w.failed.attempts))
		values[":status"] = num(int64(w.failed.status))
		values[":err"] = str(w.failed.lastErr)
		values[":next"] = num(w.failed.next.UnixNano())
		next.attempts = w.failed.attempts
	case w.done > q.done:
		set = append(set, "attempts = :zero")
		remove = append(remove, "last_status_code", "last_error", "next_attempt_time")
		values[":zero"] = num(0)
		next.attempts = 0
	}
	if q.hasRedo {
		remove = append(remove, "redo")
	}
	cond := "rvn = :rvn"
	switch w.after {
	case keepClaim, putOff:
		until, owner := d.o.Now().Add(d.o.ClaimTTL), d.o.Owner
		if w.after == putOff {
			until, owner = w.until, waiting
		}
		set = append(set, "claim_owner = :owner", "claim_until = :until", "due_time = :untilText")
		values[":owner"], values[":until"], values[":untilText"] = str(owner), num(until.UnixNano()), str(dueText(until))
		next.claimOwner, next.claimUntil = owner, time.Unix(0, until.UnixNano())
	case release, drop:
		remove = append(remove, "due_shard", "due_time", "claim_owner", "claim_until")
		next.claimOwner, next.claimUntil = "", time.Time{}
		if w.after == release {
			cond += " AND wanted <= :done"
		}
	}
	expr := "SET " + strings.Join(set, ", ") + " ADD rvn :one"
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       queueKey(q.ref),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: values,
	}, next
}
