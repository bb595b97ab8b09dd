package projection

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Rebuild replaces a user's history with one made from the ledger itself:
// the same items the stream would have written, a state recomputed from the
// entries, and no item the ledger does not have.
//
// It may run while the projector applies the stream. Each of its writes is a
// transaction guarded by the state's version, as the projector's are, so the
// two take turns on the state item. History up to the state's version is
// rewritten from the ledger, a purchase's refunded amount counting the
// refunds up to that version, a grant's reversed amount the reversals
// (the projector adds later ones); if the
// projector moves the state meanwhile, the rebuild reads it again and goes
// on from where it was. Versions past the state are then applied as the
// stream applies them. A state past the ledger (a corrupted projection)
// goes back to the ledger's last version.
func (h *History) Rebuild(ctx context.Context, user string) error {
	done := int64(0) // versions rewritten so far
	for attempt := 1; ; attempt++ {
		err := h.rebuild(ctx, user, &done)
		if !errors.Is(err, errStateMoved) {
			if err != nil {
				return fmt.Errorf("rebuild %q: %w", user, err)
			}
			return nil
		}
		if attempt == maxRebuildAttempts {
			return fmt.Errorf("rebuild %q: the projector kept moving the state: %w", user, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		}
	}
}

// maxRebuildAttempts bounds how often a rebuild starts over on a moved state
// (it keeps what it wrote).
const maxRebuildAttempts = 100

func (h *History) rebuild(ctx context.Context, user string, done *int64) error {
	// The state first, then the ledger: the ledger then has every version the
	// state has applied.
	guard, version, err := h.stateGuard(ctx, user)
	if err != nil {
		return err
	}
	entries, err := h.ledger.EntriesAfter(ctx, user, 0, 1<<31-1)
	if err != nil {
		return err
	}
	for i, e := range entries {
		if e.Version != int64(i)+1 {
			return fmt.Errorf("the ledger has version %d where %d belongs", e.Version, i+1)
		}
	}
	last := int64(len(entries))
	target := min(version, last)
	running := map[int64]decimal.Decimal{} // running amounts as the stream path has them at target
	st := history.State{UserID: user}
	for _, e := range entries[:target] {
		if v, amount, ok := history.AddsTo(e); ok {
			running[v] = running[v].Add(amount)
		}
		st = st.Add(e)
	}
	var ops []types.TransactWriteItem
	for _, e := range entries[min(*done, target):target] {
		if _, ok := history.Running(e); ok {
			e = history.WithRunning(e, running[e.Version])
		}
		ops = append(ops, types.TransactWriteItem{Put: &types.Put{TableName: &h.table, Item: h.historyItem(e)}})
	}
	// Items past the state: the projector writes none without moving the
	// state, so these are a corrupted projection's.
	extra, _, err := h.list(ctx, user, listQuery{after: target, oldestFirst: true, limit: 1 << 20})
	if err != nil {
		return err
	}
	for _, e := range extra {
		ops = append(ops, types.TransactWriteItem{Delete: &types.Delete{TableName: &h.table, Key: h.key(user, historySK(e.Version))}})
	}
	// The state, recomputed, goes in the last transaction; a state with
	// nothing under it goes.
	var final types.TransactWriteItem
	switch {
	case target > 0:
		final.Put = &types.Put{TableName: &h.table, Item: h.stateItem(st), ConditionExpression: guard.ConditionExpression,
			ExpressionAttributeNames: guard.ExpressionAttributeNames, ExpressionAttributeValues: guard.ExpressionAttributeValues}
	case version > 0:
		final.Delete = &types.Delete{TableName: &h.table, Key: guard.Key, ConditionExpression: guard.ConditionExpression,
			ExpressionAttributeNames: guard.ExpressionAttributeNames, ExpressionAttributeValues: guard.ExpressionAttributeValues}
	}
	for len(ops) > 0 || final.Put != nil || final.Delete != nil {
		chunk := ops[:min(len(ops), maxTxItems-1)]
		items := slices.Clone(chunk)
		isLast := len(chunk) == len(ops)
		if isLast && (final.Put != nil || final.Delete != nil) {
			items = append(items, final)
		} else {
			items = append(items, types.TransactWriteItem{ConditionCheck: guard})
		}
		_, err := h.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		var canceled *types.TransactionCanceledException
		if errors.As(err, &canceled) && stateMoved(canceled.CancellationReasons, len(items)-1) {
			return fmt.Errorf("%w: %w", errStateMoved, err)
		}
		if err != nil {
			return err
		}
		for _, it := range chunk {
			if it.Put != nil {
				*done = max(*done, historyVersion(it.Put.Item))
			}
		}
		ops = ops[len(chunk):]
		if isLast {
			break
		}
	}
	if target < last {
		return h.applyUser(ctx, user, nil, last)
	}
	return nil
}

// stateMoved says whether a cancelled transaction, whose item guard guards
// the state, met a moved state or a concurrent transaction.
func stateMoved(reasons []types.CancellationReason, guard int) bool {
	for i, r := range reasons {
		switch code := aws.ToString(r.Code); {
		case code == "TransactionConflict", i == guard && code == "ConditionalCheckFailed":
			return true
		}
	}
	return false
}

// stateGuard reads a user's state version and returns a condition that holds
// while it stays: version = v, no state, or (a corrupted state) no numeric
// version, which counts as past every version.
func (h *History) stateGuard(ctx context.Context, user string) (*types.ConditionCheck, int64, error) {
	key := h.key(user, stateSK)
	out, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, 0, fmt.Errorf("get history state: %w", err)
	}
	guard := &types.ConditionCheck{TableName: &h.table, Key: key}
	if len(out.Item) == 0 {
		guard.ConditionExpression = aws.String("attribute_not_exists(PK)")
		return guard, 0, nil
	}
	if v, ok := out.Item["version"].(*types.AttributeValueMemberN); ok {
		if version, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
			guard.ConditionExpression = aws.String("version = :v")
			guard.ExpressionAttributeValues = map[string]types.AttributeValue{":v": v}
			return guard, version, nil
		}
	}
	guard.ConditionExpression = aws.String("attribute_exists(PK) AND NOT attribute_type(version, :n)")
	guard.ExpressionAttributeValues = map[string]types.AttributeValue{":n": ddbattr.S("N")}
	return guard, math.MaxInt64, nil
}

// RebuildAll rebuilds every user's history from the ledger.
func (h *History) RebuildAll(ctx context.Context) (users int, err error) {
	var mu sync.Mutex
	err = h.ledger.Accounts(ctx, 4, func(a ledger.Account) error {
		mu.Lock()
		users++
		mu.Unlock()
		return h.Rebuild(ctx, a.UserID)
	})
	return users, err
}
