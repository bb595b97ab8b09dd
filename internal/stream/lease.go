package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
)

// Errors of the lease table.
var (
	ErrLeaseHeld = errors.New("lease is held by another owner")
	ErrLeaseLost = errors.New("lease was lost")
)

// Lease is the right to process one shard, and where processing got to.
type Lease struct {
	Key        string
	Owner      string
	Expires    time.Time
	RVN        int64  // record version number: every write by the owner bumps it
	Checkpoint string // sequence number of the last applied record
	Finished   bool   // the shard is closed and fully applied
}

// LeaseTable keeps leases in DynamoDB. Every write by an owner is
// conditional on its owner and record version number, so an owner that lost
// its lease cannot write over its successor; a lease is taken over only once
// it has expired, also by a conditional write.
type LeaseTable struct {
	db    LeaseAPI
	table string
	now   func() time.Time
}

// LeaseAPI is the part of the DynamoDB client the lease table uses.
type LeaseAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// NewLeaseTable returns the lease table named table.
func NewLeaseTable(db LeaseAPI, table string, now func() time.Time) *LeaseTable {
	if now == nil {
		now = time.Now
	}
	return &LeaseTable{db: db, table: table, now: now}
}

// Get reads a lease; ok is false if it was never written.
func (t *LeaseTable) Get(ctx context.Context, key string) (Lease, bool, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &t.table,
		Key:            map[string]types.AttributeValue{"PK": ddbattr.S(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Lease{}, false, fmt.Errorf("get lease %s: %w", key, err)
	}
	if len(out.Item) == 0 {
		return Lease{Key: key}, false, nil
	}
	return decodeLease(out.Item)
}

// Acquire takes the lease for owner: a new one, one owner already holds, or
// an expired one. It fails with ErrLeaseHeld while another owner's is valid.
func (t *LeaseTable) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	cur, ok, err := t.Get(ctx, key)
	if err != nil {
		return Lease{}, err
	}
	now := t.now()
	if ok && cur.Owner != owner && now.Before(cur.Expires) {
		return cur, ErrLeaseHeld
	}
	next := cur
	next.Owner, next.Expires, next.RVN = owner, now.Add(ttl), cur.RVN+1
	item := leaseItem(next)
	var cond string
	values := map[string]types.AttributeValue{}
	if ok {
		cond = "rvn = :seen"
		values[":seen"] = ddbattr.Int(cur.RVN)
	} else {
		cond = "attribute_not_exists(PK)"
		values = nil
	}
	_, err = t.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 &t.table,
		Item:                      item,
		ConditionExpression:       &cond,
		ExpressionAttributeValues: values,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return cur, ErrLeaseHeld // someone else took or renewed it first
	}
	if err != nil {
		return Lease{}, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	return next, nil
}

// Renew extends a held lease.
func (t *LeaseTable) Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	return t.write(ctx, l, ttl, l.Checkpoint, l.Finished)
}

// Checkpoint records how far the owner has applied the shard, and extends the lease.
func (t *LeaseTable) Checkpoint(ctx context.Context, l Lease, ttl time.Duration, seq string, finished bool) (Lease, error) {
	return t.write(ctx, l, ttl, seq, finished)
}

// Release gives the lease up at once, so another owner need not wait for it
// to expire. The checkpoint stays.
func (t *LeaseTable) Release(ctx context.Context, l Lease) error {
	_, err := t.write(ctx, l, -time.Millisecond, l.Checkpoint, l.Finished)
	return err
}

func (t *LeaseTable) write(ctx context.Context, l Lease, ttl time.Duration, seq string, finished bool) (Lease, error) {
	next := l
	next.Expires, next.RVN, next.Checkpoint, next.Finished = t.now().Add(ttl), l.RVN+1, seq, finished
	_, err := t.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &t.table,
		Item:                leaseItem(next),
		ConditionExpression: aws.String("#owner = :owner AND rvn = :rvn"),
		ExpressionAttributeNames: map[string]string{
			"#owner": "owner",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": ddbattr.S(l.Owner), ":rvn": ddbattr.Int(l.RVN)},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return l, fmt.Errorf("%w: %s (owner %s, rvn %d)", ErrLeaseLost, l.Key, l.Owner, l.RVN)
	}
	if err != nil {
		return l, fmt.Errorf("write lease %s: %w", l.Key, err)
	}
	return next, nil
}

func leaseItem(l Lease) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"PK":         ddbattr.S(l.Key),
		"owner":      ddbattr.S(l.Owner),
		"expires_at": ddbattr.Int(l.Expires.UnixMilli()),
		"rvn":        ddbattr.Int(l.RVN),
		"finished":   ddbattr.Bool(l.Finished),
	}
	if l.Checkpoint != "" {
		item["checkpoint"] = ddbattr.S(l.Checkpoint)
	}
	return item
}

func decodeLease(item map[string]types.AttributeValue) (Lease, bool, error) {
	l := Lease{}
	var err error
	get := func(name string) string { return ddbattr.Text(item, name) }
	l.Key, l.Owner, l.Checkpoint = get("PK"), get("owner"), get("checkpoint")
	ms, err1 := strconv.ParseInt(get("expires_at"), 10, 64)
	rvn, err2 := strconv.ParseInt(get("rvn"), 10, 64)
	if err = errors.Join(err1, err2); err != nil {
		return l, true, fmt.Errorf("decode lease %s: %w", l.Key, err)
	}
	l.Expires, l.RVN = time.UnixMilli(ms), rvn
	if b, ok := item["finished"].(*types.AttributeValueMemberBOOL); ok {
		l.Finished = b.Value
	}
	return l, true, nil
}

// A catch-up request is recorded in the lease table, under its own key, by
// a consumer that finds stream records lost before it reads on past them,
// and it is cleared only once a catch-up from the ledger has finished. Kept
// in memory only, it would die with a consumer that stops in between,
// while the checkpoint had already moved past the loss.

// RequestCatchUp records a request for a catch-up under key.
func (t *LeaseTable) RequestCatchUp(ctx context.Context, key string) error {
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &t.table,
		Key:              map[string]types.AttributeValue{"PK": ddbattr.S(key)},
		UpdateExpression: aws.String("ADD requests :one SET requested_at = :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": ddbattr.Int(1), ":now": ddbattr.S(t.now().UTC().Format(time.RFC3339Nano)),
		},
	})
	if err != nil {
		return fmt.Errorf("record a catch-up request: %w", err)
	}
	return nil
}

// CatchUpRequests returns how many catch-up requests under key wait.
func (t *LeaseTable) CatchUpRequests(ctx context.Context, key string) (int64, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &t.table,
		Key:            map[string]types.AttributeValue{"PK": ddbattr.S(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("read catch-up requests: %w", err)
	}
	v, ok := out.Item["requests"].(*types.AttributeValueMemberN)
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(v.Value, 10, 64)
}

// ClearCatchUp clears the catch-up requests under key if they are still
// seen, the requests a catch-up that has just finished answered. It returns
// false if more came meanwhile: they need another catch-up.
func (t *LeaseTable) ClearCatchUp(ctx context.Context, key string, seen int64) (bool, error) {
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &t.table,
		Key:                       map[string]types.AttributeValue{"PK": ddbattr.S(key)},
		UpdateExpression:          aws.String("SET requests = :zero"),
		ConditionExpression:       aws.String("requests = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": ddbattr.Int(0), ":n": ddbattr.Int(seen)},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("clear catch-up requests: %w", err)
	}
	return true, nil
}

// Held is a lease kept alive by a heartbeat (a renewal every TTL/3) until
// Stop. The holder's own writes (checkpoints) go through it too, so that
// they and the heartbeat take turns: each write moves the RVN the next one
// needs.
type Held struct {
	t    *LeaseTable
	ttl  time.Duration
	mu   sync.Mutex
	l    Lease
	stop context.CancelFunc
	beat sync.WaitGroup
}

// Hold starts the heartbeat of l. A renewal that fails calls failed with its
// error (ErrLeaseLost once another owner took the lease over); the
// heartbeat tries again at the next beat until Stop.
func (t *LeaseTable) Hold(l Lease, ttl time.Duration, failed func(error)) *Held {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Held{t: t, ttl: ttl, l: l, stop: cancel}
	h.beat.Go(func() {
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			h.mu.Lock()
			next, err := t.Renew(ctx, h.l, ttl)
			if err == nil {
				h.l = next
			}
			h.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				failed(err)
			}
		}
	})
	return h
}

// Lease is the lease as last written.
func (h *Held) Lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l
}

// Checkpoint records how far the holder got (see LeaseTable.Checkpoint).
func (h *Held) Checkpoint(ctx context.Context, seq string, finished bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	next, err := h.t.Checkpoint(ctx, h.l, h.ttl, seq, finished)
	if err == nil {
		h.l = next
	}
	return err
}

// Stop ends the heartbeat; the lease stays its holder's until it expires.
func (h *Held) Stop() {
	h.stop()
	h.beat.Wait()
}

// Release stops the heartbeat and gives the lease up at once.
func (h *Held) Release(ctx context.Context) error {
	h.Stop()
	return h.t.Release(ctx, h.Lease())
}

// LeaseHeldError is Lock's refusal while another owner holds the lease.
type LeaseHeldError struct {
	Lease Lease // the other owner's
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%s (%s, until %s)", ErrLeaseHeld, e.Lease.Owner, e.Lease.Expires.UTC().Format(time.RFC3339))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// HeldBy names the owner that holds the lease, and until when.
func (e *LeaseHeldError) HeldBy() (owner string, until time.Time) {
	return e.Lease.Owner, e.Lease.Expires
}

// Lock acquires key for owner and holds it (Hold) until unlock, for a
// holder that needs only the lease, as a lock: it keeps reconciliations
// from overlapping. lost is told when a renewal fails. While another owner
// holds it, Lock fails with a *LeaseHeldError.
func (t *LeaseTable) Lock(ctx context.Context, key, owner string, ttl time.Duration, lost func(error)) (unlock func(context.Context) error, err error) {
	l, err := t.Acquire(ctx, key, owner, ttl)
	if errors.Is(err, ErrLeaseHeld) {
		return nil, &LeaseHeldError{Lease: l}
	}
	if err != nil {
		return nil, err
	}
	return t.Hold(l, ttl, lost).Release, nil
}
