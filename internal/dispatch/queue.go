package dispatch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
}

const queueSK = "Q"

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
	q := queue{
		ref:        ref,
		wanted:     getN(item, "wanted"),
		done:       getN(item, "done"),
		attempts:   int(getN(item, "attempts")),
		admitFrom:  time.Unix(0, getN(item, "admit_from")).UTC(),
		claimOwner: getS(item, "claim_owner"),
		claimUntil: time.Unix(0, getN(item, "claim_until")),
		rvn:        getN(item, "rvn"),
	}
	return q
}

func isConditionFailed(err error) bool {
	var failed *types.ConditionalCheckFailedException
	return errors.As(err, &failed)
}

// markWanted records on the queue of ref that versions up to last are
// wanted, making the queue if there is none (done just before first). A
// queue already wanting as much is left alone. A queue that was idle
// becomes due now; one waiting for a retry keeps its due_time.
func (d *Dispatcher) markWanted(ctx context.Context, ref queueRef, first, last int64, admitFrom time.Time) error {
	pk := queuePK(ref.endpointID, ref.userID)
	_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.table,
		Key:       queueKey(ref),
		UpdateExpression: aws.String("SET wanted = :w, done = if_not_exists(done, :d), endpoint_id = :ep, queue_endpoint = :ep, " +
			"user_id = :u, admit_from = if_not_exists(admit_from, :af), attempts = if_not_exists(attempts, :zero), " +
			"due_shard = :shard, due_time = if_not_exists(due_time, :now) ADD rvn :one"),
		ConditionExpression: aws.String("attribute_not_exists(PK) OR wanted < :w"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":w": num(last), ":d": num(first - 1), ":ep": str(ref.endpointID), ":u": str(ref.userID),
			":af": num(admitFrom.UnixNano()), ":zero": num(0), ":shard": str(dueShard(pk, queueSK)),
			":now": str(dueText(d.o.Now())), ":one": num(1),
		},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("mark queue %s: %w", pk, err)
	}
	return nil
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

// errClaimLost ends a delivery whose queue another writer took or moved:
// the claim expired and another dispatcher holds it, or a redelivery
// moved done.
var errClaimLost = errors.New("queue claim lost")

// queueChange is one write of the claim holder to its queue.
type queueChange struct {
	set    []string // "name = :value" clauses
	remove []string
	values map[string]types.AttributeValue
}

// write applies c to q under a condition on the record version q was read
// at. Another writer in between (Apply raising wanted, a stale claimer
// failing to claim does not write) makes it read the queue again and
// retry, as long as the claim is still this dispatcher's and done has not
// moved; otherwise errClaimLost. build makes the change from the queue as
// read, so that it sees the wanted of the latest read.
func (d *Dispatcher) write(ctx context.Context, q queue, build func(queue) queueChange) (queue, error) {
	for {
		c := build(q)
		values := map[string]types.AttributeValue{":rvn": num(q.rvn), ":one": num(1)}
		for k, v := range c.values {
			values[k] = v
		}
		expr := ""
		if len(c.set) > 0 {
			expr = "SET " + strings.Join(c.set, ", ")
		}
		expr += " ADD rvn :one"
		if len(c.remove) > 0 {
			expr += " REMOVE " + strings.Join(c.remove, ", ")
		}
		out, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &d.table,
			Key:                       queueKey(q.ref),
			UpdateExpression:          aws.String(expr),
			ConditionExpression:       aws.String("rvn = :rvn"),
			ExpressionAttributeValues: values,
			ReturnValues:              types.ReturnValueAllNew,
		})
		if err == nil {
			return decodeQueue(q.ref, out.Attributes), nil
		}
		if !isConditionFailed(err) {
			return q, fmt.Errorf("write queue: %w", err)
		}
		now, ok, err := d.readQueue(ctx, q.ref)
		if err != nil {
			return q, err
		}
		if !ok || now.claimOwner != d.o.Owner || now.done != q.done {
			return q, errClaimLost
		}
		q = now
	}
}

// advance moves done to version (the head answered 2xx, was given up, or
// versions up to it are skipped) and resets the head's attempts. A queue
// with nothing more wanted leaves the "due" index and is released; one
// with more stays claimed, and renewed.
func (d *Dispatcher) advance(ctx context.Context, q queue, version int64) (queue, error) {
	return d.write(ctx, q, func(q queue) queueChange {
		c := queueChange{
			set:    []string{"done = :done", "attempts = :zero"},
			remove: []string{"last_status_code", "last_error", "next_attempt_time"},
			values: map[string]types.AttributeValue{":done": num(version), ":zero": num(0)},
		}
		if version >= q.wanted {
			c.remove = append(c.remove, "due_shard", "due_time", "claim_owner", "claim_until")
		} else {
			until := d.o.Now().Add(d.o.ClaimTTL)
			c.set = append(c.set, "claim_until = :until", "due_time = :untilText")
			c.values[":until"], c.values[":untilText"] = num(until.UnixNano()), str(dueText(until))
		}
		return c
	})
}

// release gives up the claim and puts the queue's head off until next,
// recording the failed attempt (attempts 0: nothing attempted, as for a
// disabled endpoint).
func (d *Dispatcher) release(ctx context.Context, q queue, attempts, status int, lastErr string, next time.Time) error {
	_, err := d.write(ctx, q, func(queue) queueChange {
		c := queueChange{
			set:    []string{"due_time = :due"},
			remove: []string{"claim_owner", "claim_until"},
			values: map[string]types.AttributeValue{":due": str(dueText(next))},
		}
		if attempts > 0 {
			c.set = append(c.set, "attempts = :a", "last_status_code = :status", "last_error = :err", "next_attempt_time = :next")
			c.values[":a"] = num(int64(attempts))
			c.values[":status"] = num(int64(status))
			c.values[":err"] = str(lastErr)
			c.values[":next"] = num(next.UnixNano())
		}
		return c
	})
	return err
}

// drop takes the queue of a deleted endpoint out of the "due" index.
func (d *Dispatcher) drop(ctx context.Context, q queue) error {
	_, err := d.write(ctx, q, func(queue) queueChange {
		return queueChange{remove: []string{"due_shard", "due_time", "claim_owner", "claim_until"}}
	})
	return err
}
