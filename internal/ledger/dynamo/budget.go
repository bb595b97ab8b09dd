package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/throttle"
)

// Budgets (ledger.Budgets) live in the ledger table, each item under a
// partition key of its own:
//
//	PK=BUDGET#<id>      SK=B            budget: total, status, description, create_time, shards
//	PK=BUDGET#<id>#<n>  SK=S            escrow shard n (0..shards-1): remaining, granted, and a
//	                                    copy of the status, so that a grant's condition reads
//	                                    one item
//	PK=BUDGET#<id>      SK=R#<request>  a creation's or a top-up's request record: its hash
//	PK=BUDGETS          SK=B#<id>       the directory ListBudgets pages through
//
// The ledger table rather than a table of their own: a grant's draw goes in
// the TransactWriteItems of the user's entry, which one table keeps within
// one stream, one set of migrations and the proxy's one table of limits;
// the budget's partitions are as apart from the users' as another table's
// would be. No scan of the ledger reads them as users (Users and Accounts
// take SK "A" and "E#1" only).
//
// A grant draws on one shard, by the hash of its request_id
// (ledger.BudgetShard): an Update of the shard in the user's transaction,
// if remaining >= amount AND status = OPEN, so the check and the count are
// one conditional write. A shard too dry for the grant borrows first, in a
// transaction of its own that moves remaining from the others (each donor
// under its own remaining >= what it gives); the grant is refused
// BUDGET_EXHAUSTED only when all shards together, read in one
// TransactGetItems (a serializable snapshot), do not cover it. The sum of
// the shards' granted is the budget's granted; of their remaining its
// remaining; total lives on the budget's item, moved by top-ups with a
// shard's remaining in one transaction.
//
// A budget's shard count k only grows (budget_growth.go): a transaction
// raises the budget item's shards and puts the new, empty shards, under
// the condition that shards is still what the grower read. So a stale k
// (cached) names shards that exist, and every read of all shards takes the
// budget item in the same snapshot and reads again with its k if that is
// more: nothing that sums the shards or decides BUDGET_EXHAUSTED misses
// one.
const (
	budgetSK          = "B"
	shardSK           = "S"
	budgetsDirectory  = "BUDGETS"
	budgetDirPrefix   = "B#"
	maxBorrowAttempts = 10
)

func budgetPK(id string) string { return "BUDGET#" + id }

func budgetKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(budgetPK(id)), "SK": ddbattr.S(budgetSK)}
}

func shardKey(id string, n int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(budgetPK(id) + "#" + strconv.Itoa(n)), "SK": ddbattr.S(shardSK)}
}

func budgetRequestKey(id, requestID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(budgetPK(id)), "SK": ddbattr.S(requestPrefix + requestID)}
}

func budgetDirectoryKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(budgetsDirectory), "SK": ddbattr.S(budgetDirPrefix + id)}
}

// shard is one escrow shard as read.
type shard struct {
	remaining, granted decimal.Decimal
	status             ledger.BudgetStatus
}

func decodeShard(item map[string]types.AttributeValue) (shard, error) {
	d := decoder{item: item}
	s := shard{remaining: d.num("remaining"), granted: d.num("granted"), status: ledger.BudgetStatus(d.str("status"))}
	return s, d.err("budget shard")
}

// CreateBudget creates a budget, its shards and its directory entry in one
// transaction; the same creation again is Replayed.
func (l *Ledger) CreateBudget(ctx context.Context, c ledger.BudgetCreation) (ledger.Budget, bool, error) {
	now := l.now()
	nb := c.Budget(now)
	items := []types.TransactWriteItem{
		{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			Item: with(budgetKey(nb.ID), map[string]types.AttributeValue{
				"budget_id": ddbattr.S(nb.ID), "total": ddbattr.Decimal(nb.Total), "status": ddbattr.S(string(nb.Status)),
				"description": ddbattr.S(nb.Description), "create_time": ddbattr.S(formatTime(now)), "shards": ddbattr.Int(int64(nb.Shards)),
			})}},
		{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			Item:                                with(budgetRequestKey(c.BudgetID, c.RequestID), map[string]types.AttributeValue{"request_hash": ddbattr.S(c.Hash())})}},
		{Put: &types.Put{TableName: &l.table, Item: with(budgetDirectoryKey(c.BudgetID), map[string]types.AttributeValue{"budget_id": ddbattr.S(c.BudgetID)})}},
	}
	for n, part := range ledger.SplitBudget(nb.Remaining, nb.Shards) {
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"),
			Item: with(shardKey(nb.ID, n), map[string]types.AttributeValue{
				"budget_id": ddbattr.S(nb.ID), "remaining": ddbattr.Decimal(part), "granted": ddbattr.Decimal(nb.Granted), "status": ddbattr.S(string(nb.Status)),
			})}})
	}
	reasons, err := l.budgetTransaction(ctx, items)
	switch {
	case err != nil:
		return ledger.Budget{}, false, err
	case reasons == nil:
		b, err := l.Budget(ctx, c.BudgetID)
		return b, false, err
	case failed(reasons, 0) || failed(reasons, 1):
		cur, recorded, err := l.budgetCancelled(ctx, c.BudgetID, c.RequestID, reasons)
		if err != nil {
			return ledger.Budget{}, false, err
		}
		if b, replayed, err := ledger.DecideBudgetCreation(c, cur, recorded, now); err != nil || replayed {
			return b, replayed, err
		}
	}
	return ledger.Budget{}, false, fmt.Errorf("create budget %q cancelled: %v", c.BudgetID, codes(reasons))
}

// TopUpBudget adds to a budget's total and to the remaining of the shard
// its request_id hashes to, with its request record, in one transaction.
// A closed budget is refused BUDGET_CLOSED (not recorded: an admin's call,
// which may be sent again once it is known why).
func (l *Ledger) TopUpBudget(ctx context.Context, u ledger.BudgetTopUp) (ledger.Budget, bool, error) {
	k, ok, err := l.budgetShards(ctx, u.BudgetID)
	if err != nil {
		return ledger.Budget{}, false, err
	}
	if !ok {
		return ledger.DecideBudgetTopUp(u, nil, "")
	}
	items := []types.TransactWriteItem{
		{Update: &types.Update{TableName: &l.table, Key: budgetKey(u.BudgetID),
			UpdateExpression:                    aws.String("SET #total = #total + :a"),
			ConditionExpression:                 aws.String("#status = :open"),
			ExpressionAttributeNames:            map[string]string{"#status": "status", "#total": "total"}, // reserved words
			ExpressionAttributeValues:           map[string]types.AttributeValue{":a": ddbattr.Decimal(u.Amount), ":open": ddbattr.S(string(ledger.BudgetOpen))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
		{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			Item:                                with(budgetRequestKey(u.BudgetID, u.RequestID), map[string]types.AttributeValue{"request_hash": ddbattr.S(u.Hash())})}},
		{Update: &types.Update{TableName: &l.table, Key: shardKey(u.BudgetID, ledger.BudgetShard(u.RequestID, k)),
			UpdateExpression:          aws.String("SET remaining = remaining + :a"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": ddbattr.Decimal(u.Amount)}}},
	}
	reasons, err := l.budgetTransaction(ctx, items)
	switch {
	case err != nil:
		return ledger.Budget{}, false, err
	case reasons == nil:
		b, err := l.Budget(ctx, u.BudgetID)
		return b, false, err
	case failed(reasons, 0) || failed(reasons, 1):
		cur, recorded, err := l.budgetCancelled(ctx, u.BudgetID, u.RequestID, reasons)
		if err != nil {
			return ledger.Budget{}, false, err
		}
		if b, replayed, err := ledger.DecideBudgetTopUp(u, cur, recorded); err != nil || replayed {
			return b, replayed, err
		}
	}
	return ledger.Budget{}, false, fmt.Errorf("top up budget %q cancelled: %v", u.BudgetID, codes(reasons))
}

// CloseBudget closes a budget and every shard in one transaction, so that
// no grant draws on it once the call has answered. Closing a closed
// budget changes nothing and is Replayed. The transaction holds only
// while the budget has the shards it closes: a growth in between (which
// puts new open shards) makes it read the budget and try again.
func (l *Ledger) CloseBudget(ctx context.Context, id string) (ledger.Budget, bool, error) {
	if err := ledger.ValidateBudgetID(id); err != nil {
		return ledger.Budget{}, false, err
	}
	for attempt := 1; ; attempt++ {
		b, err := l.Budget(ctx, id)
		if err != nil {
			return ledger.Budget{}, false, err
		}
		if _, replayed := ledger.DecideBudgetClose(b); replayed {
			return b, true, nil // closed before, or by another call since a failed condition
		}
		if attempt > maxBorrowAttempts {
			return ledger.Budget{}, false, ledger.Errorf(ledger.KindAborted, ledger.ReasonTooManyConflicts,
				"gave up after %d attempts to close budget %q: its shards kept growing; retrying is safe", maxBorrowAttempts, id)
		}
		closed := map[string]types.AttributeValue{":closed": ddbattr.S(string(ledger.BudgetClosed)), ":open": ddbattr.S(string(ledger.BudgetOpen)), ":k": ddbattr.Int(int64(b.Shards))}
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: &l.table, Key: budgetKey(id),
			UpdateExpression: aws.String("SET #status = :closed"), ConditionExpression: aws.String("#status = :open AND shards = :k"),
			ExpressionAttributeNames: map[string]string{"#status": "status"}, ExpressionAttributeValues: closed}}}
		for n := range b.Shards {
			items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: &l.table, Key: shardKey(id, n),
				UpdateExpression: aws.String("SET #status = :closed"), ExpressionAttributeNames: map[string]string{"#status": "status"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":closed": closed[":closed"]}}})
		}
		reasons, err := l.budgetTransaction(ctx, items)
		if err != nil {
			return ledger.Budget{}, false, err
		}
		if reasons == nil {
			b, err = l.Budget(ctx, id)
			return b, false, err
		}
		if !failed(reasons, 0) {
			return ledger.Budget{}, false, fmt.Errorf("close budget %q cancelled: %v", id, codes(reasons))
		}
	}
}

// Budget reads a budget: its item and its shards in one TransactGetItems
// (snapshot), so that the sums are of one moment of the shards and total.
func (l *Ledger) Budget(ctx context.Context, id string) (ledger.Budget, error) {
	if err := ledger.ValidateBudgetID(id); err != nil {
		return ledger.Budget{}, err
	}
	k, ok, err := l.budgetShards(ctx, id)
	if err != nil {
		return ledger.Budget{}, err
	}
	if !ok {
		return ledger.Budget{}, ledger.BudgetNotFound(id)
	}
	item, shards, err := l.snapshot(ctx, id, k)
	if err != nil {
		return ledger.Budget{}, err
	}
	d := decoder{item: item}
	b := ledger.Budget{ID: id, Total: d.num("total"), Status: ledger.BudgetStatus(d.str("status")),
		Description: d.optStr("description"), CreateTime: d.time("create_time"), Shards: len(shards)}
	if err := d.err("budget"); err != nil {
		return ledger.Budget{}, err
	}
	b.Granted, b.Remaining = decimal.Zero, decimal.Zero
	for _, s := range shards {
		b.Granted, b.Remaining = b.Granted.Add(s.granted), b.Remaining.Add(s.remaining)
	}
	return b, nil
}

// ListBudgets pages through the budgets by budget id: a Query of the
// directory from the key after the last budget of the page before, which
// the page token holds (pagetoken's key tokens). A budget created between
// two pages is listed if its id comes after that key; none is ever
// skipped or listed twice (budgets are never deleted).
func (l *Ledger) ListBudgets(ctx context.Context, q ledger.BudgetQuery) ([]ledger.Budget, string, error) {
	q, err := q.Check()
	if err != nil {
		return nil, "", err
	}
	var start map[string]types.AttributeValue
	if q.PageToken != "" {
		after, err := l.tokens.DecodeKey(q.PageToken, "budgets")
		if err != nil {
			return nil, "", err
		}
		start = budgetDirectoryKey(after)
	}
	var ids []string
	for len(ids) <= q.PageSize { // one more than the page: is there a next one?
		out, err := l.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &l.table, ConsistentRead: aws.Bool(true),
			KeyConditionExpression:    aws.String("PK = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(budgetsDirectory)},
			ProjectionExpression:      aws.String("SK"), ExclusiveStartKey: start,
			Limit: aws.Int32(int32(q.PageSize + 1 - len(ids))), //nolint:gosec // at most ledger.MaxPageSize + 1
		})
		if err != nil {
			return nil, "", unavailable(fmt.Errorf("list budgets: %w", err), "list the budgets")
		}
		for _, item := range out.Items {
			sk, _ := item["SK"].(*types.AttributeValueMemberS)
			if sk != nil {
				ids = append(ids, strings.TrimPrefix(sk.Value, budgetDirPrefix))
			}
		}
		if start = out.LastEvaluatedKey; start == nil {
			break
		}
	}
	next := ""
	if len(ids) > q.PageSize {
		ids = ids[:q.PageSize]
		next = l.tokens.EncodeKey(ids[len(ids)-1], "budgets")
	}
	out := make([]ledger.Budget, 0, len(ids))
	for _, id := range ids {
		b, err := l.Budget(ctx, id)
		if err != nil {
			return nil, "", err
		}
		out = append(out, b)
	}
	return out, next, nil
}

// budgetShards is how many shards budget id has, as this process last
// read or grew it (remembered: a count that another process has grown
// since still names shards that exist, and snapshot corrects it); ok is
// false if there is no such budget.
func (l *Ledger) budgetShards(ctx context.Context, id string) (int, bool, error) {
	if k, ok := l.budgetShardCounts.Load(id); ok {
		return k.(int), true, nil
	}
	item, err := l.get(ctx, budgetKey(id))
	if err != nil {
		return 0, false, unavailable(fmt.Errorf("get budget %q: %w", id, err), fmt.Sprintf("read budget %q", id))
	}
	if len(item) == 0 {
		return 0, false, nil
	}
	d := decoder{item: item}
	k := int(d.int("shards"))
	if err := d.err("budget"); err != nil {
		return 0, false, err
	}
	l.budgetShardCounts.Store(id, k)
	return k, true, nil
}

// snapshot reads budget id's item and its shards in one TransactGetItems:
// at least k shards, and as many as the item says it has then (read
// again if it has grown past k, and remembered).
func (l *Ledger) snapshot(ctx context.Context, id string, k int) (map[string]types.AttributeValue, []shard, error) {
	for {
		gets := make([]types.TransactGetItem, 1, k+1)
		gets[0] = types.TransactGetItem{Get: &types.Get{TableName: &l.table, Key: budgetKey(id)}}
		for n := range k {
			gets = append(gets, types.TransactGetItem{Get: &types.Get{TableName: &l.table, Key: shardKey(id, n)}})
		}
		out, err := l.db.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: gets})
		if err != nil {
			return nil, nil, unavailable(fmt.Errorf("get the shards of budget %q: %w", id, err), fmt.Sprintf("read budget %q", id))
		}
		if len(out.Responses) != k+1 || len(out.Responses[0].Item) == 0 {
			return nil, nil, fmt.Errorf("budget %q: %d of %d items read", id, len(out.Responses), k+1)
		}
		item := out.Responses[0].Item
		d := decoder{item: item}
		now := int(d.int("shards"))
		if err := d.err("budget"); err != nil {
			return nil, nil, err
		}
		if now > k { // grown since k was read
			l.budgetShardCounts.Store(id, now)
			k = now
			continue
		}
		shards := make([]shard, k)
		for n, r := range out.Responses[1:] {
			if len(r.Item) == 0 {
				return nil, nil, fmt.Errorf("budget %q has no shard %d", id, n)
			}
			if shards[n], err = decodeShard(r.Item); err != nil {
				return nil, nil, err
			}
		}
		return item, shards, nil
	}
}

// budgetTransaction sends an admin call's transaction, trying it again
// after a race or a throttle as the write path does. It returns the
// cancellation reasons of a transaction a condition cancelled, nil if it
// committed.
func (l *Ledger) budgetTransaction(ctx context.Context, items []types.TransactWriteItem) ([]types.CancellationReason, error) {
	for attempt := 1; ; attempt++ {
		_, err := l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		var cancelled *types.TransactionCanceledException
		switch {
		case err == nil:
			return nil, nil
		case errors.As(err, &cancelled):
			if !raced(cancelled.CancellationReasons) {
				return cancelled.CancellationReasons, nil
			}
		case !throttle.Refused(err):
			return nil, fmt.Errorf("budget transaction: %w", err)
		}
		if attempt >= l.retry.MaxAttempts {
			return nil, giveUp(err, attempt)
		}
		if err := sleep(ctx, l.retry.backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// raced says whether a cancellation lost a race or a partition's capacity
// rather than a condition: worth trying again as it was.
func raced(reasons []types.CancellationReason) bool {
	for _, r := range reasons {
		switch c := aws.ToString(r.Code); {
		case c == "ConditionalCheckFailed":
			return false
		case c == "TransactionConflict" || throttle.Reason(c):
			return true
		}
	}
	return false
}

func failed(reasons []types.CancellationReason, i int) bool {
	return i < len(reasons) && aws.ToString(reasons[i].Code) == "ConditionalCheckFailed"
}

// budgetCancelled reads what a creation's or a top-up's cancelled
// transaction failed on, for the decision (ledger.DecideBudgetCreation,
// DecideBudgetTopUp): the budget (nil: none), and the hash recorded under
// requestID if the record's condition (item 1) failed. Each is final once
// written (budgets and request records are never deleted, a closed budget
// never opens), so a read after the cancellation sees what failed it.
func (l *Ledger) budgetCancelled(ctx context.Context, id, requestID string, reasons []types.CancellationReason) (*ledger.Budget, string, error) {
	var recorded string
	if failed(reasons, 1) {
		old := reasons[1].Item
		if len(old) == 0 {
			var err error
			if old, err = l.get(ctx, budgetRequestKey(id, requestID)); err != nil {
				return nil, "", fmt.Errorf("get request %q of budget %q: %w", requestID, id, err)
			}
		}
		d := decoder{item: old}
		if recorded = d.str("request_hash"); d.err("budget request") != nil {
			recorded = "?" // unreadable: another request's, never this one's hash
		}
	}
	b, err := l.Budget(ctx, id)
	switch {
	case ledger.ReasonOf(err) == ledger.ReasonBudgetNotFound:
		return nil, recorded, nil
	case err != nil:
		return nil, "", err
	}
	return &b, recorded, nil
}

func with(key, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
	for k, v := range attrs {
		key[k] = v
	}
	return key
}

// The write path's part: a grant's draw on its shard.

// budgetDraw names the shard a grant draws on.
type budgetDraw struct {
	budget string
	shard  int
}

// groupBudgets is what a group draws on budgets: the shard facts chose for
// each grant (by request_id), the shards drawn on (a transaction updates an
// item once) and the index of each draw's update, for decodeCancel.
type groupBudgets struct {
	chosen map[string]budgetDraw
	drawn  map[budgetDraw]bool
	items  []int
	draws  []budgetDraw // the draw of each of items
}

// budgetFacts reads budget id, which m draws on or gives back to, for
// ledger.Facts: nil if there is no such budget. For a grant: its status if
// closed; the remaining of m's shard if it covers m, after borrowing for
// it if it did not; else the remaining of all shards together, which does
// not cover m. For a give-back (a debit adjustment naming the budget, a
// reversal of a grant from it): see giveBackFacts. A mutation whose shard
// its group draws on already waits for the next group.
func (l *Ledger) budgetFacts(ctx context.Context, t *txn, m ledger.Mutation, id string) (*ledger.BudgetRef, step, error) {
	k, ok, err := l.budgetShards(ctx, id)
	if err != nil || !ok {
		return nil, decide, err
	}
	draw := budgetDraw{budget: id, shard: ledger.BudgetShard(m.RequestID, k)}
	if t.budgets.drawn[draw] {
		return nil, nextGroup, nil
	}
	if m.Type != ledger.EntryGrant {
		return l.giveBackFacts(ctx, t, m, draw)
	}
	for range maxBorrowAttempts {
		item, err := l.get(ctx, shardKey(draw.budget, draw.shard))
		if err != nil {
			return nil, answered, unavailable(fmt.Errorf("get shard %d of budget %q: %w", draw.shard, draw.budget, err), fmt.Sprintf("read budget %q", draw.budget))
		}
		s, err := decodeShard(item)
		if err != nil {
			return nil, answered, err
		}
		if s.status != ledger.BudgetOpen || !s.remaining.LessThan(m.Amount) {
			if t.budgets.chosen == nil {
				t.budgets.chosen = map[string]budgetDraw{}
			}
			t.budgets.chosen[m.RequestID] = draw
			return &ledger.BudgetRef{Status: s.status, Remaining: s.remaining}, decide, nil
		}
		short, err := l.borrow(ctx, draw, k, m.Amount)
		if err != nil || short != nil {
			return short, decide, err
		}
	}
	return nil, answered, ledger.Errorf(ledger.KindAborted, ledger.ReasonTooManyConflicts,
		"gave up after %d attempts to borrow for shard %d of budget %q: other grants kept taking it; retrying with the same request_id is safe", maxBorrowAttempts, draw.shard, draw.budget)
}

// giveBackFacts reads what m, a debit adjustment or a reversal, may give
// back to draw's budget: what the user's entries took from it
// (ledger.BudgetNet), summed over the entries up to the account the group
// starts from, so such a mutation starts a group of its own (an admin's
// correction, a return of an order paid from a campaign: rarer than the
// grants).
func (l *Ledger) giveBackFacts(ctx context.Context, t *txn, m ledger.Mutation, draw budgetDraw) (*ledger.BudgetRef, step, error) {
	if len(t.members) > 0 {
		return nil, nextGroup, nil
	}
	var entries []ledger.Entry
	if t.running.Version > 0 {
		var err error
		if entries, err = l.EntriesAfter(ctx, m.UserID, 0, int(t.running.Version)); err != nil {
			return nil, answered, fmt.Errorf("sum what %q took from budget %q: %w", m.UserID, draw.budget, err)
		}
	}
	if t.budgets.chosen == nil {
		t.budgets.chosen = map[string]budgetDraw{}
	}
	t.budgets.chosen[m.RequestID] = draw
	return &ledger.BudgetRef{Status: ledger.BudgetOpen, UserNet: ledger.BudgetNet(entries, draw.budget)}, decide, nil
}

// borrow moves remaining from the other shards of draw's budget to its
// shard, enough for amount, in one transaction, each donor under the
// condition that it still has what it gives. It reads the shards in one
// TransactGetItems first: if together they do not cover amount, or the
// budget is closed, it returns that, for the domain to refuse the grant.
// A nil answer is a borrow done, or lost to a concurrent one: the shard is
// read again.
func (l *Ledger) borrow(ctx context.Context, draw budgetDraw, k int, amount decimal.Decimal) (*ledger.BudgetRef, error) {
	_, shards, err := l.snapshot(ctx, draw.budget, k)
	if err != nil {
		return nil, err
	}
	k = len(shards) // more, if the budget grew since k was read
	remaining := make([]decimal.Decimal, k)
	all := decimal.Zero
	for n, s := range shards {
		if s.status != ledger.BudgetOpen {
			return &ledger.BudgetRef{Status: s.status}, nil
		}
		remaining[n], all = s.remaining, all.Add(s.remaining)
	}
	if all.LessThan(amount) {
		return &ledger.BudgetRef{Status: ledger.BudgetOpen, Remaining: all}, nil
	}
	if !remaining[draw.shard].LessThan(amount) {
		return nil, nil // a top-up or another borrow filled it since
	}
	give, _ := ledger.Borrow(remaining, draw.shard, amount.Sub(remaining[draw.shard]))
	var items []types.TransactWriteItem
	got := decimal.Zero
	open := ddbattr.S(string(ledger.BudgetOpen))
	for n, g := range give {
		if !g.IsPositive() {
			continue
		}
		got = got.Add(g)
		items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: &l.table, Key: shardKey(draw.budget, n),
			UpdateExpression:          aws.String("SET remaining = remaining - :g"),
			ConditionExpression:       aws.String("remaining >= :g AND #status = :open"),
			ExpressionAttributeNames:  map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":g": ddbattr.Decimal(g), ":open": open}}})
	}
	items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: &l.table, Key: shardKey(draw.budget, draw.shard),
		UpdateExpression:          aws.String("SET remaining = remaining + :g"),
		ConditionExpression:       aws.String("#status = :open"),
		ExpressionAttributeNames:  map[string]string{"#status": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": ddbattr.Decimal(got), ":open": open}}})
	_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var cancelled *types.TransactionCanceledException
	switch {
	case err == nil:
	case errors.As(err, &cancelled):
		if slices.ContainsFunc(cancelled.CancellationReasons, func(r types.CancellationReason) bool { return partitionThrottled(aws.ToString(r.Code)) }) {
			l.budgetThrottled(ctx, draw.budget)
		}
	case throttle.Refused(err):
		l.budgetThrottled(ctx, draw.budget)
	default:
		return nil, fmt.Errorf("borrow for shard %d of budget %q: %w", draw.shard, draw.budget, err)
	}
	return nil, nil // done, or lost to another borrow or grant: read again
}

// drawFromBudget adds c's draw on its budget's shard to the group, if c's
// entry, just joined, names a budget: for a grant (pending or not), SET
// remaining = remaining - amount, granted = granted + amount, if
// remaining >= amount AND status = OPEN; for a give-back (a debit
// adjustment naming the budget, a reversal of a grant from it), the
// opposite, on any status. The amount is the entry's
// (ledger.Entry.BudgetAmount): a reversal that names none takes all that
// is left of its grant. (A shard's granted may so go below zero; the
// budget's, the sum over its shards, does not.)
func (t *txn) drawFromBudget(c *call) {
	draw, ok := t.budgets.chosen[c.m.RequestID]
	p, joined := t.byRequest[c.m.RequestID]
	if !ok || !joined || p.entry.BudgetID == "" {
		return
	}
	amount := p.entry.BudgetAmount()
	if t.budgets.drawn == nil {
		t.budgets.drawn = map[budgetDraw]bool{}
	}
	t.budgets.drawn[draw] = true
	t.budgets.items = append(t.budgets.items, len(t.items))
	t.budgets.draws = append(t.budgets.draws, draw)
	if amount.IsNegative() { // a give-back, to a closed budget too
		t.items = append(t.items, types.TransactWriteItem{Update: &types.Update{TableName: t.table, Key: shardKey(draw.budget, draw.shard),
			UpdateExpression:          aws.String("SET remaining = remaining + :a, granted = granted - :a"),
			ConditionExpression:       aws.String("attribute_exists(PK)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":a": ddbattr.Decimal(amount.Neg())}}})
		return
	}
	t.items = append(t.items, types.TransactWriteItem{Update: &types.Update{TableName: t.table, Key: shardKey(draw.budget, draw.shard),
		UpdateExpression:                    aws.String("SET remaining = remaining - :a, granted = granted + :a"),
		ConditionExpression:                 aws.String("remaining >= :a AND #status = :open"),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":a": ddbattr.Decimal(amount), ":open": ddbattr.S(string(ledger.BudgetOpen))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
}

// budgetRaced says whether a cancelled group failed a budget shard's
// condition: another grant took the shard below this one's amount since
// it was read, or the budget closed; planned again, the grant borrows or
// is refused on the shards as they are then.
func budgetRaced(g group, code func(int) string) error {
	for _, i := range g.budgets.items {
		if code(i) == "ConditionalCheckFailed" {
			return fmt.Errorf("%w: budget shard at item %d moved", errRetry, i)
		}
	}
	return nil
}
