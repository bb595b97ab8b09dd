package dynamo

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// A budget's shards grow when DynamoDB throttles them. Each process counts
// the throttles of its writes to a budget's shards: a grant's draw in a
// user's transaction cancelled with ThrottlingError (or
// ProvisionedThroughputExceeded) on the shard's item, and a borrow
// throttled. When a budget has had BudgetGrowth.Throttles of them within
// BudgetGrowth.Window, the process doubles its shard count k (up to
// ledger.MaxBudgetShards) in one transaction: the budget item's shards
// from k to 2k under the condition shards = k AND status = OPEN, and a Put
// of each new shard, empty (remaining 0, granted 0, OPEN), under the
// condition that it does not exist. Nothing moves points, so granted +
// remaining = total holds throughout; grants that hash to a new shard find
// it dry and borrow (budget.go), which fills it. Two processes that grow
// the budget at once race on the condition: one commits, the other's
// transaction is cancelled whole and it takes the count the budget item
// has. After a growth the process counts from zero, and throttles in the
// window after it do not count: the new shards get that long to take load.

// BudgetGrowth says when a budget's shards grow (see above). A zero
// Throttles is DefaultBudgetGrowth's; a negative one never grows a budget.
type BudgetGrowth struct {
	Throttles int
	Window    time.Duration
}

// DefaultBudgetGrowth grows a budget after 20 throttles of its shards in
// 10 s: far more than a shard at its limit for a moment sends (the write
// path retries a throttled group after 100 ms and more), and few enough
// that a budget its shards cannot carry grows soon after a campaign's
// launch, which throttles many grants at once.
var DefaultBudgetGrowth = BudgetGrowth{Throttles: 20, Window: 10 * time.Second}

// budgetThrottles counts one budget's throttles in this process.
type budgetThrottles struct {
	mu     sync.Mutex
	since  time.Time // the window's start
	count  int
	ignore time.Time // throttles before this (a window after a growth) do not count
}

// partitionThrottled says whether a cancellation reason is a partition's
// capacity refusing the item: what more shards relieve (not the account's
// RequestLimitExceeded).
func partitionThrottled(code string) bool {
	return code == "ThrottlingError" || code == "ProvisionedThroughputExceeded"
}

// noteBudgetThrottles counts, for its budget, each draw of g that its
// cancellation says was throttled (code gives an item's reason).
func (l *Ledger) noteBudgetThrottles(ctx context.Context, g group, code func(int) string) {
	for n, i := range g.budgets.items {
		if partitionThrottled(code(i)) {
			l.budgetThrottled(ctx, g.budgets.draws[n].budget)
		}
	}
}

// budgetThrottled counts a throttle of budget id's shards, and grows the
// budget when it is the one that reaches the threshold.
func (l *Ledger) budgetThrottled(ctx context.Context, id string) {
	if l.growth.Throttles < 0 {
		return
	}
	v, _ := l.budgetThrottles.LoadOrStore(id, &budgetThrottles{})
	bt := v.(*budgetThrottles)
	now := l.now()
	bt.mu.Lock()
	if now.Before(bt.ignore) {
		bt.mu.Unlock()
		return
	}
	if now.Sub(bt.since) > l.growth.Window {
		bt.since, bt.count = now, 0
	}
	bt.count++
	grow := bt.count >= l.growth.Throttles
	if grow {
		bt.count, bt.ignore = 0, now.Add(l.growth.Window)
	}
	bt.mu.Unlock()
	if !grow {
		return
	}
	if err := l.growBudget(ctx, id); err != nil {
		l.log.Warn("budget shards not grown", "budget_id", id, "error", err)
	}
}

// growBudget doubles budget id's shards (see above), from the count this
// process knows. If another process grew it first, or it is closed, it
// takes the count the budget item has and grows nothing.
func (l *Ledger) growBudget(ctx context.Context, id string) error {
	from, ok, err := l.budgetShards(ctx, id)
	if err != nil || !ok || from >= ledger.MaxBudgetShards {
		return err
	}
	to := min(2*from, ledger.MaxBudgetShards)
	open := ddbattr.S(string(ledger.BudgetOpen))
	items := []types.TransactWriteItem{{Update: &types.Update{TableName: &l.table, Key: budgetKey(id),
		UpdateExpression:                    aws.String("SET shards = :to"),
		ConditionExpression:                 aws.String("shards = :from AND #status = :open"),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":to": ddbattr.Int(int64(to)), ":from": ddbattr.Int(int64(from)), ":open": open},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
	for n := from; n < to; n++ {
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"),
			Item: with(shardKey(id, n), map[string]types.AttributeValue{
				"budget_id": ddbattr.S(id), "remaining": ddbattr.Decimal(decimal.Zero), "granted": ddbattr.Decimal(decimal.Zero), "status": open,
			})}})
	}
	reasons, err := l.budgetTransaction(ctx, items)
	switch {
	case err != nil:
		return err
	case reasons == nil:
		l.budgetShardCounts.Store(id, to)
		l.observe.BudgetGrown(from, to)
		l.log.Info("budget shards grown", "budget_id", id, "from", from, "to", to,
			"throttles", l.growth.Throttles, "window", l.growth.Window.String())
		return nil
	case failed(reasons, 0):
		// Grown by another process, or closed: its count as it is now.
		d := decoder{item: reasons[0].Item}
		if now := int(d.int("shards")); d.err("budget") == nil && now > from {
			l.budgetShardCounts.Store(id, now)
		}
		return nil
	}
	return fmt.Errorf("grow budget %q from %d shards cancelled: %v", id, from, codes(reasons))
}
