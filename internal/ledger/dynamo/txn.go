package dynamo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Building a group's transaction from the domain's decisions (the middle
// step of the write path, see write.go, whose comment lists the items and
// their conditions).

// planned is one mutation in a group.
type planned struct {
	c        *call
	entry    ledger.Entry   // the mutation's own entry
	puts     []int          // indexes of its entries' puts in the transaction (expirations too)
	purchase requestRecord  // refunds: the purchase; reversals: the grant
	request  int            // index of its request record in the transaction
	cap      int            // refunds and reversals: index of the purchase's or the grant's update; else -1
	holds    []int          // indexes of its hold records' puts and updates
	hold     ledger.Hold    // the hold it made or resolved (ledger.Decision.Hold)
	after    ledger.Account // the account after its entries: its answer
}

// refusal is a call the domain refused.
type refusal struct {
	c   *call
	err error
	// record is the index of its refusal record in the transaction, for a
	// final refusal (ledger.Kind.Final); -1 for one that is not recorded.
	record int
}

// repeat is a call whose request_id another call of its group already
// carries (concurrent retries of one request): it gets that call's answer,
// as the record the group writes for it says.
type repeat struct {
	c   *call
	rec requestRecord
}

// group is what planning makes of the calls.
type group struct {
	items    []types.TransactWriteItem
	members  []*planned
	refused  []refusal
	recorded int // refusals with a record in items
	repeats  []repeat
	later    []*call // past the group's limits: next group
	before   ledger.Account
	after    ledger.Account
	// A refund's purchase is past before: the account was read before
	// another writer's purchase, and the refund's entry would take the
	// purchase's own key. Nothing is sent: the account is read again.
	behind bool
	// budgets: the grants' draws on budget shards (budget.go).
	budgets groupBudgets
}

// setIn sets m[k] to v, making m first: most groups write none of the maps
// they may need (a refund's purchase touched, a hold made or resolved), and
// an empty map made in advance is an allocation a group.
func setIn[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

// groupHolds are the holds a group's entries made or resolved: a
// transaction may write a hold's record once, and a capture or a void of
// a hold its group resolved must be refused as the group leaves it.
type groupHolds struct {
	made     map[string]bool
	resolved map[string]ledger.HoldState
}

// note notes what e does to a hold.
func (h *groupHolds) note(e ledger.Entry) {
	switch {
	case e.Type == ledger.EntryHold:
		setIn(&h.made, e.RequestID, true)
	case e.HoldRequestID != "":
		setIn(&h.resolved, e.HoldRequestID, ledger.ResolvedHold(ledger.Hold{}, e).State)
	}
}

// txn builds a group's TransactWriteItems as planning adds the domain's
// decisions to it, one call at a time: the items so far, the account they
// leave, and what the account's condition needs.
type txn struct {
	group
	table   *string
	ids     entryIDs
	now     time.Time
	running ledger.Account  // the account after the items so far
	cum     decimal.Decimal // balance change so far
	need    decimal.Decimal // least starting balance the steps so far need
	// needsActive: the group has a mutation a frozen account refuses.
	needsActive bool
	touched     map[int64]bool           // purchases refunded in this group (one update per item)
	byRequest   map[string]*planned      // members by request_id
	records     map[string]requestRecord // a transaction may write a request record once
	holds       groupHolds
	// ahead: planned on the account the group in flight leaves, before
	// it commits (ahead.go); stopped: the group ended early for that.
	ahead, stopped bool
}

// entryIDs gives entries their ids: the Ledger (Ledger.newID), or one id
// given (SingleTransaction). An interface rather than a func, so that the
// write path's *Ledger goes in without a method value to allocate per group.
type entryIDs interface {
	newID(t time.Time) string
}

// newTxn starts the transaction of a group planned on acct at now; item 0,
// the account's, is written by close.
func newTxn(table *string, ids entryIDs, acct ledger.Account, now time.Time) txn {
	return txn{
		group:     group{before: acct, items: []types.TransactWriteItem{{}}},
		table:     table,
		ids:       ids,
		now:       now,
		running:   acct,
		cum:       decimal.Zero,
		need:      decimal.Zero,
		byRequest: map[string]*planned{},
		records:   map[string]requestRecord{},
	}
}

// room says whether n more items fit, with the account's and the index's.
func (t *txn) room(n int) bool { return len(t.items)+n <= maxTxItems-indexReserve }

// fits says whether n more items (c's) fit the group. A decision that
// would not fit even an empty group releases more holds than a
// transaction can write (they expired together): as many of them as fit
// are released first, in this group, and c is decided again in the
// next, until what is left of its releases fits. Were there no hold to
// release, c could never commit, and is answered so.
func (t *txn) fits(ctx context.Context, c *call, n int) bool {
	if t.room(n) {
		return true
	}
	if len(t.items) > 1 {
		return false
	}
	if t.ahead { // decided once the account it is planned on has committed
		t.stopped = true
		return false
	}
	dec := ledger.DecideExpiryUpTo(t.running, t.now, (maxTxItems-indexReserve-1)/2)
	if len(dec.Entries) == 0 {
		c.finish(ledger.Result{}, fmt.Errorf("a mutation of user %q takes %d items, more than a transaction holds", c.m.UserID, n))
		return false
	}
	t.add(&planned{c: &call{ctx: ctx, m: ledger.Mutation{UserID: t.before.UserID}, sweep: true, done: make(chan struct{})}, request: -1, cap: -1}, dec)
	return false
}

// decisionItems is how many items the decision dec on a mutation of type
// info takes: its entries, with their hold records, its request record,
// and for a refund its purchase's update, for a reversal its grant's.
func decisionItems(info ledger.EntryTypeInfo, dec ledger.Decision) int {
	n := entryItems(dec.Entries) + 1
	if info.RefersToPurchase || info.RefersToGrant {
		n++
	}
	if dec.Entry().BudgetID != "" { // its draw on the budget's shard
		n++
	}
	return n
}

// join adds c, which the domain allowed as dec, to the group: its entries,
// its request record and for a refund its purchase's update, for a
// reversal its grant's (purchase is then the grant's record).
func (t *txn) join(c *call, info ledger.EntryTypeInfo, dec ledger.Decision, purchase requestRecord) {
	p := &planned{c: c, purchase: purchase, cap: -1}
	t.add(p, dec)
	switch {
	case info.RefersToPurchase:
		p.cap = len(t.items)
		t.items = append(t.items, types.TransactWriteItem{Update: purchaseRefundUpdate(*t.table, c.m, purchase)})
		setIn(&t.touched, purchase.Version, true)
	case info.RefersToGrant:
		p.cap = len(t.items)
		t.items = append(t.items, types.TransactWriteItem{Update: grantReversalUpdate(*t.table, dec.Entry(), purchase)})
		setIn(&t.touched, purchase.Version, true)
	}
	t.byRequest[c.m.RequestID] = p
	t.records[c.m.RequestID] = requestRecord{Hash: c.m.Hash(), RequestRecord: ledger.RequestRecord{Type: p.entry.Type, Version: p.entry.Version, Last: p.after.Version}}
	t.needsActive = t.needsActive || info.NeedsActive
}

// add puts dec's entries into the group as p's (and its request record,
// if it has one), and moves the group's account on.
func (t *txn) add(p *planned, dec ledger.Decision) {
	for j, e := range dec.Entries {
		e = t.putEntry(p, e)
		t.holds.note(e)
		if dec.Main < 0 { // the sweeper's: its answer is its last entry
			p.entry = e
		}
		if j == dec.Main {
			p.entry, p.hold = e, dec.Hold
			p.request = len(t.items)
			t.items = append(t.items, types.TransactWriteItem{Put: &types.Put{
				TableName:                           t.table,
				Item:                                requestItem(p.c.m, e, dec.After.Version),
				ConditionExpression:                 aws.String("attribute_not_exists(PK)"),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}})
		}
	}
	p.after = dec.After
	t.members = append(t.members, p)
	t.cum = t.cum.Add(dec.After.Balance.Sub(t.running.Balance))
	// What is available (balance less held) must cover every step: the
	// starting balance must be at least what is held then, less the
	// change so far.
	t.need = decimal.Max(t.need, dec.After.Held.Sub(t.cum))
	t.running = dec.After
}

// refuse adds c's refusal err to the group. A final refusal is recorded
// under the request_id, in this transaction: it commits only if the
// account is as it was decided on (the account's condition, see close).
func (t *txn) refuse(c *call, err error) {
	r := refusal{c: c, err: err, record: -1}
	if e, ok := recordable(err); ok {
		r.record = len(t.items)
		t.items = append(t.items, types.TransactWriteItem{Put: &types.Put{
			TableName:                           t.table,
			Item:                                refusalItem(c.m, e, t.now),
			ConditionExpression:                 aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
		t.recorded++
		t.records[c.m.RequestID] = requestRecord{Hash: c.m.Hash(), RequestRecord: ledger.RequestRecord{Type: c.m.Type, Amount: c.m.Amount, Refusal: e}}
	}
	t.refused = append(t.refused, r)
}

// close ends the group: the index of next expiries follows the account,
// in this transaction (room for its two items is kept: indexReserve), and
// item 0 moves the account, or checks it for a group of refusals alone,
// on the condition that it is as planning read it.
func (t *txn) close() group {
	t.after = t.running
	t.items = append(t.items, expiryIndexItems(t.table, t.before, t.after)...)
	if ledger.SnapshotDue(t.before.Version, t.after.Version) {
		// One item more every ledger.SnapshotEvery entries, in this
		// transaction: the account as of any time folds from it (asof.go).
		t.items = append(t.items, types.TransactWriteItem{Put: &types.Put{TableName: t.table, Item: snapshotItem(t.after)}})
	}
	// A recorded refusal rests on the whole account as read, its status
	// too: a refusal on a frozen account must not be recorded after an
	// unfreeze, which moves no version.
	cond := accountCondition(t.before, t.needsActive || t.recorded > 0, t.need)
	if len(t.members) > 0 {
		t.items[0] = types.TransactWriteItem{Update: accountUpdate(t.table, t.before, t.after, cond)}
	} else {
		t.items[0] = types.TransactWriteItem{ConditionCheck: accountCheck(t.table, t.before, cond)}
	}
	return t.group
}

// putEntry gives e its id and adds its put to the group, as one of p's
// entries, with what it does to its hold's record: a HOLD puts it, a
// CAPTURE or a RELEASE resolves the hold it resolves of the account so
// far, which it was decided on. It returns e with its id.
func (t *txn) putEntry(p *planned, e ledger.Entry) ledger.Entry {
	e.ID = t.ids.newID(t.now)
	p.puts = append(p.puts, len(t.items))
	t.items = append(t.items, types.TransactWriteItem{Put: &types.Put{
		TableName:           t.table,
		Item:                entryItem(e),
		ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}})
	switch {
	case e.Type == ledger.EntryHold:
		p.holds = append(p.holds, len(t.items))
		t.items = append(t.items, types.TransactWriteItem{Put: &types.Put{
			TableName:           t.table,
			Item:                holdItem(ledger.HoldOf(e)),
			ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
	case e.HoldRequestID != "":
		h, _ := t.running.Hold(e.HoldRequestID)
		p.holds = append(p.holds, len(t.items))
		t.items = append(t.items, types.TransactWriteItem{Update: holdResolveUpdate(*t.table, ledger.ResolvedHold(h, e))})
	}
	return e
}

// entryItems is how many items entries take in a transaction: each its
// own, and a HOLD, CAPTURE or RELEASE its hold's record too.
func entryItems(entries []ledger.Entry) int {
	n := len(entries)
	for _, e := range entries {
		if e.Type == ledger.EntryHold || e.HoldRequestID != "" {
			n++
		}
	}
	return n
}

// indexReserve is the room a group keeps for the index of next expiries
// (the old item's delete and the new one's put) and a snapshot of the
// account (asof.go).
const indexReserve = 3

// condition is a condition expression with its names and values.
type condition struct {
	expr   *string
	names  map[string]string
	values map[string]types.AttributeValue
	// vals holds values' values, with room for accountUpdate's: the
	// condition is the account item's, which takes it over.
	vals ddbattr.Values
}

// accountExprs are accountCondition's expressions for an account of a
// version, by what else they hold (accountConditionExpr), made once:
// pointers to them go into the transactions, which only read them.
var accountExprs = func() (exprs [16]string) {
	for i := range exprs {
		e := "version = :expected AND balance = :before"
		if i&condHeld != 0 {
			e += " AND held = :held"
		}
		if i&condPending != 0 {
			e += " AND pending = :pending"
		}
		if i&condStatus != 0 {
			e += " AND #status = :status"
		}
		if i&condNeed != 0 {
			e += " AND balance >= :need"
		}
		exprs[i] = e
	}
	return exprs
}()

// What an account's condition holds besides its version and balance.
const (
	condHeld = 1 << iota
	condPending
	condStatus
	condNeed
)

// Expressions and names shared by every transaction, which only reads
// them.
var (
	noAccountExpr = "attribute_not_exists(PK)"
	statusName    = map[string]string{"#status": "status"} // a reserved word
	plainUpdate   = "SET balance = :balance, version = :version, update_time = :now"
)

// accountCondition holds only for the account a group was planned on: no
// account for a new user, else the version and the balance (a balance
// changed without a new version, what reconciliation reports, must not be
// overwritten from a cache) and what is held, if anything is, the status
// if withStatus (a group that spends on purchases, or records a refusal),
// and a balance that leaves what is available covering the group's debits
// and holds at every step (need).
func accountCondition(before ledger.Account, withStatus bool, need decimal.Decimal) condition {
	if before.Version == 0 {
		return condition{expr: &noAccountExpr}
	}
	// Room for the condition's values and the update's (accountUpdate):
	// three strings (the key, the time), five numbers and more.
	c := condition{vals: ddbattr.MakeValues(4, 8), values: make(map[string]types.AttributeValue, 8)}
	c.values[":expected"] = c.vals.Int(before.Version)
	c.values[":before"] = c.vals.Decimal(before.Balance)
	which := 0
	if len(before.Holds) > 0 || !before.Held.IsZero() {
		which |= condHeld
		c.values[":held"] = c.vals.Decimal(before.Held)
	}
	if len(before.PendingLots) > 0 || !before.Pending.IsZero() {
		which |= condPending
		c.values[":pending"] = c.vals.Decimal(before.Pending)
	}
	if withStatus {
		which |= condStatus
		c.names = statusName
		c.values[":status"] = c.vals.S(string(before.Status))
	}
	if need.IsPositive() {
		which |= condNeed
		c.values[":need"] = c.vals.Decimal(need)
	}
	c.expr = &accountExprs[which]
	return c
}

// accountUpdate moves the aggregate from before to after under cond (see
// accountCondition), whose values it takes over.
func accountUpdate(table *string, before, after ledger.Account, cond condition) *types.Update {
	v := &cond.vals
	values := cond.values
	if values == nil {
		values = make(map[string]types.AttributeValue, 8)
	}
	values[":balance"] = v.Decimal(after.Balance)
	values[":version"] = v.Int(after.Version)
	values[":now"] = v.S(formatTime(after.UpdateTime))
	names := cond.names
	set := []string{"balance = :balance", "version = :version", "update_time = :now"}
	var remove []string
	// The expiring buckets, and what is held: written only when there are
	// some (or were), so that an account whose points never expire and
	// that never holds updates as few attributes as it ever did. (Not by
	// NextDue, which holds count in.)
	switch {
	case expires(after.Buckets):
		set = append(set, "buckets = :buckets")
		values[":buckets"] = bucketsItem(after.Buckets)
	case expires(before.Buckets):
		remove = append(remove, "buckets")
	}
	switch {
	case len(after.Holds) > 0 && !sameHolds(before, after):
		set = append(set, "held = :heldAfter", "holds = :holds")
		values[":heldAfter"] = v.Decimal(after.Held)
		values[":holds"] = holdsItem(after.Holds)
	case len(after.Holds) == 0 && len(before.Holds) > 0:
		remove = append(remove, "held", "holds")
	}
	switch {
	case len(after.PendingLots) > 0 && !sameLots(before, after):
		set = append(set, "pending = :pendingAfter", "pending_lots = :lots")
		values[":pendingAfter"] = v.Decimal(after.Pending)
		values[":lots"] = lotsItem(after.PendingLots)
	case len(after.PendingLots) == 0 && len(before.PendingLots) > 0:
		remove = append(remove, "pending", "pending_lots")
	}

	if before.Version == 0 {
		set = append(set, "user_id = :user", "#status = :active", "create_time = :now")
		names = statusName
		values[":user"] = v.S(after.UserID)
		values[":active"] = v.S(string(ledger.StatusActive))
	}
	update := &plainUpdate // most updates: the balance, the version, the time
	if len(set) > 3 || len(remove) > 0 {
		u := "SET " + strings.Join(set, ", ")
		if len(remove) > 0 {
			u += " REMOVE " + strings.Join(remove, ", ")
		}
		update = &u
	}
	return &types.Update{
		TableName:                           table,
		Key:                                 keyWith(v, after.UserID, accountSK, 2),
		UpdateExpression:                    update,
		ConditionExpression:                 cond.expr,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// expires says whether any of bs expires.
func expires(bs []ledger.Bucket) bool {
	return slices.ContainsFunc(bs, kept)
}

// sameHolds says whether a and b hold the same open holds (a hold never
// changes while open).
func sameHolds(a, b ledger.Account) bool {
	return a.Held.Equal(b.Held) && slices.EqualFunc(a.Holds, b.Holds, func(x, y ledger.Hold) bool { return x.RequestID == y.RequestID })
}

// sameLots says whether a and b have the same pending lots, of the same
// amounts (a reversal takes from a lot in part).
func sameLots(a, b ledger.Account) bool {
	return a.Pending.Equal(b.Pending) && slices.EqualFunc(a.PendingLots, b.PendingLots, func(x, y ledger.PendingLot) bool {
		return x.GrantRequestID == y.GrantRequestID && x.Amount.Equal(y.Amount)
	})
}

// accountCheck holds a group of refusals alone to the account they were
// decided on: cond (see accountCondition), and no change.
func accountCheck(table *string, before ledger.Account, cond condition) *types.ConditionCheck {
	return &types.ConditionCheck{
		TableName:                           table,
		Key:                                 accountKey(before.UserID),
		ConditionExpression:                 cond.expr,
		ExpressionAttributeNames:            cond.names,
		ExpressionAttributeValues:           cond.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// purchaseRefundUpdate adds a refund to its purchase, guarded so that the
// refunds never sum to more than the purchase (DynamoDB conditions cannot
// add, so the cap is precomputed: refunded_amount <= purchase amount -
// refund) and that the purchase's refunded amount is the one the refund was
// planned on, which decided the buckets it gives back to.
func purchaseRefundUpdate(table string, m ledger.Mutation, purchase requestRecord) *types.Update {
	return &types.Update{
		TableName:           &table,
		Key:                 entryKey(m.UserID, purchase.Version),
		UpdateExpression:    aws.String("SET refunded_amount = refunded_amount + :refund"),
		ConditionExpression: aws.String("#type = :purchase AND refunded_amount = :read AND refunded_amount <= :cap"),
		ExpressionAttributeNames: map[string]string{
			"#type": "type",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":refund":   ddbattr.Decimal(m.Amount),
			":purchase": ddbattr.S(string(purchase.Type)), // a purchase or a capture
			":read":     ddbattr.Decimal(purchase.Refunded),
			":cap":      ddbattr.Decimal(purchase.Amount.Sub(m.Amount)),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// grantReversalUpdate adds reversal e to its grant's reversed amount,
// guarded so that the grant's reversed amount is the one the reversal was
// planned on (grant.Reversed), which decided that it stays within the
// grant: so concurrent reversals never take back more than it.
func grantReversalUpdate(table string, e ledger.Entry, grant requestRecord) *types.Update {
	cond := "#type = :grant AND reversed_amount = :read"
	if grant.Reversed.IsZero() { // a grant's item has none until its first reversal
		cond = "#type = :grant AND (attribute_not_exists(reversed_amount) OR reversed_amount = :read)"
	}
	return &types.Update{
		TableName:                &table,
		Key:                      entryKey(e.UserID, grant.Version),
		UpdateExpression:         aws.String("SET reversed_amount = if_not_exists(reversed_amount, :zero) + :taken"),
		ConditionExpression:      &cond,
		ExpressionAttributeNames: map[string]string{"#type": "type"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":taken": ddbattr.Decimal(e.Amount.Neg().Sub(e.PendingChange)),
			":zero":  ddbattr.Decimal(decimal.Zero),
			":grant": ddbattr.S(string(ledger.EntryGrant)),
			":read":  ddbattr.Decimal(grant.Reversed),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// holdResolveUpdate writes that hold h resolved (ledger.ResolvedHold):
// only if its record is still HELD, so that a hold resolves once even were
// the account's condition wrong.
func holdResolveUpdate(table string, h ledger.Hold) *types.Update {
	set := "SET #state = :state, resolve_version = :version"
	values := map[string]types.AttributeValue{
		":state":   ddbattr.S(string(h.State)),
		":version": ddbattr.Int(h.ResolveVersion),
		":held":    ddbattr.S(string(ledger.HoldHeld)),
		":id":      ddbattr.S(h.RequestID),
	}
	if h.State == ledger.HoldCaptured {
		set += ", captured_amount = :captured"
		values[":captured"] = ddbattr.Decimal(h.CapturedAmount)
	}
	return &types.Update{
		TableName:                           &table,
		Key:                                 holdKey(h.UserID, h.Version),
		UpdateExpression:                    &set,
		ConditionExpression:                 aws.String("#state = :held AND request_id = :id"),
		ExpressionAttributeNames:            map[string]string{"#state": "state"}, // a reserved word
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}
