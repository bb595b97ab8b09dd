package projection

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// History table layout (the user is the partition key, as in the ledger):
//
//	PK=ACCT#<user> SK=S                        state: last applied version, totals
//	PK=ACCT#<user> SK=H#<version, 20 digits>   history item: the entry's attributes
const (
	stateSK       = "S"
	historyPrefix = "H#"
	timeLayout    = "2006-01-02T15:04:05.000000Z" // as the ledger writes create_time
	maxTxItems    = 100                           // TransactWriteItems limit
	// A batch of entries, each possibly a refund that updates its purchase's
	// item, plus the state, must fit in one transaction.
	maxBatch = (maxTxItems - 1) / 2
)

func historySK(version int64) string { return fmt.Sprintf("%s%020d", historyPrefix, version) }

// HistoryAPI is the part of the DynamoDB client the history uses.
type HistoryAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Ledger is what the projection reads of the ledger: entries to fill gaps
// and rebuild, accounts to find users that are behind.
type Ledger interface {
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error)
	Accounts(ctx context.Context, segments int, fn func(ledger.Account) error) error
}

// State is the projection's state for one user.
type State struct {
	UserID    string
	Version   int64 // the last applied entry's version
	Balance   decimal.Decimal
	Granted   decimal.Decimal // sum of grants
	Spent     decimal.Decimal // sum of purchases (positive)
	Refunded  decimal.Decimal // sum of refunds
	Adjusted  decimal.Decimal // net sum of adjustments
	LastEntry time.Time       // create_time of the last applied entry
}

// Add is the state after applying e.
func (st State) Add(e ledger.Entry) State {
	switch e.Type {
	case ledger.EntryGrant:
		st.Granted = st.Granted.Add(e.Amount)
	case ledger.EntryPurchase:
		st.Spent = st.Spent.Sub(e.Amount)
	case ledger.EntryRefund:
		st.Refunded = st.Refunded.Add(e.Amount)
	case ledger.EntryAdjustment:
		st.Adjusted = st.Adjusted.Add(e.Amount)
	}
	st.Version, st.Balance, st.LastEntry = e.Version, e.BalanceAfter, e.CreateTime
	return st
}

// History is the per-user history projection.
type History struct {
	db     HistoryAPI
	table  string
	ledger Ledger
	now    func() time.Time
}

// NewHistory returns the projection stored in table, reading l to fill gaps.
func NewHistory(db HistoryAPI, table string, l Ledger) *History {
	return &History{db: db, table: table, ledger: l, now: time.Now}
}

func (h *History) key(user, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": s(dynamo.PartitionKey(user)), "SK": s(sk)}
}

// State reads a user's projection state (consistently); a user never
// projected has version 0.
func (h *History) State(ctx context.Context, user string) (State, error) {
	out, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, Key: h.key(user, stateSK), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return State{}, fmt.Errorf("get history state of %q: %w", user, err)
	}
	st := State{UserID: user}
	if len(out.Item) == 0 {
		return st, nil
	}
	var errs []error
	num := func(name string) decimal.Decimal {
		v, _ := out.Item[name].(*types.AttributeValueMemberN)
		if v == nil {
			errs = append(errs, fmt.Errorf("%s missing", name))
			return decimal.Zero
		}
		d, err := decimal.NewFromString(v.Value)
		errs = append(errs, err)
		return d
	}
	st.Version = num("version").IntPart()
	st.Balance, st.Granted, st.Spent, st.Refunded, st.Adjusted = num("balance"), num("granted"), num("spent"), num("refunded"), num("adjusted")
	if v, ok := out.Item["last_entry_time"].(*types.AttributeValueMemberS); ok {
		st.LastEntry, err = time.Parse(timeLayout, v.Value)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return st, fmt.Errorf("decode history state of %q: %w", user, err)
	}
	return st, nil
}

// Apply projects entries (from the stream: any users, any order, possibly
// duplicated) into history. For each user it applies versions in order:
// one already applied is skipped, and a gap before an entry is filled from
// the ledger. Users are applied concurrently.
func (h *History) Apply(ctx context.Context, entries []ledger.Entry) error {
	byUser := map[string][]ledger.Entry{}
	for _, e := range entries {
		byUser[e.UserID] = append(byUser[e.UserID], e)
	}
	return forEach(ctx, 8, mapsKeys(byUser), func(user string) error {
		es := byUser[user]
		slices.SortFunc(es, func(a, b ledger.Entry) int { return int(a.Version - b.Version) })
		return h.applyUser(ctx, user, es, es[len(es)-1].Version)
	})
}

// applyUser brings user's history up to version target, using entries
// (sorted) where they fit and the ledger where they leave a gap.
func (h *History) applyUser(ctx context.Context, user string, entries []ledger.Entry, target int64) error {
	st, err := h.State(ctx, user)
	if err != nil {
		return err
	}
	for conflicts := 0; st.Version < target; {
		for len(entries) > 0 && entries[0].Version <= st.Version {
			entries = entries[1:] // applied already
		}
		var batch []ledger.Entry
		if len(entries) > 0 && entries[0].Version == st.Version+1 {
			for i := 0; i < len(entries) && len(batch) < maxBatch && entries[i].Version == st.Version+int64(i)+1; i++ {
				batch = append(batch, entries[i])
			}
		} else {
			upTo := target
			if len(entries) > 0 {
				upTo = entries[0].Version - 1
			}
			batch, err = h.ledger.EntriesAfter(ctx, user, st.Version, int(min(upTo-st.Version, maxBatch)))
			if err != nil {
				return fmt.Errorf("fill history gap of %q after version %d: %w", user, st.Version, err)
			}
			if len(batch) == 0 || batch[0].Version != st.Version+1 {
				return fmt.Errorf("fill history gap of %q: the ledger has no entry %d", user, st.Version+1)
			}
		}
		next, err := h.commit(ctx, st, batch)
		if errors.Is(err, errStateMoved) {
			// Another projector (or a rebuild) moved the state: read it again.
			if conflicts++; conflicts > 100 {
				return fmt.Errorf("history of %q: state keeps moving", user)
			}
			if st, err = h.State(ctx, user); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		st = next
	}
	return nil
}

var errStateMoved = errors.New("history state moved")

// commit writes a run of consecutive entries following st and the new state,
// in one transaction guarded by the state's version.
func (h *History) commit(ctx context.Context, st State, batch []ledger.Entry) (State, error) {
	next := st
	items := make([]types.TransactWriteItem, 0, len(batch)+1)
	// A purchase's refunded amount in history is the sum of the refunds
	// applied after it: a purchase starts at zero, and each refund adds to
	// it here, in the transaction that applies the refund (so once).
	inBatch := map[int64]int{}              // purchase version -> index of its Put
	refunds := map[int64]*decimal.Decimal{} // purchase version -> refunds to add by one Update
	var refunded []int64                    // those versions, in order
	for _, e := range batch {
		next = next.Add(e)
		if e.Type == ledger.EntryPurchase {
			e.RefundedAmount = decimal.Zero
			inBatch[e.Version] = len(items)
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &h.table, Item: h.historyItem(e)}})
		if e.Type != ledger.EntryRefund {
			continue
		}
		if i, ok := inBatch[e.PurchaseVersion]; ok {
			// The purchase is written by this transaction too: add to its item.
			item := items[i].Put.Item
			had, _ := decimal.NewFromString(item["refunded_amount"].(*types.AttributeValueMemberN).Value)
			item["refunded_amount"] = &types.AttributeValueMemberN{Value: had.Add(e.Amount).String()}
			continue
		}
		// A transaction may touch an item once: refunds of one purchase add up.
		if sum, ok := refunds[e.PurchaseVersion]; ok {
			*sum = sum.Add(e.Amount)
			continue
		}
		amount := e.Amount
		refunds[e.PurchaseVersion] = &amount
		refunded = append(refunded, e.PurchaseVersion)
	}
	for _, v := range refunded {
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                 &h.table,
			Key:                       h.key(st.UserID, historySK(v)),
			UpdateExpression:          aws.String("SET refunded_amount = refunded_amount + :r"),
			ConditionExpression:       aws.String("attribute_exists(PK)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":r": &types.AttributeValueMemberN{Value: refunds[v].String()}},
		}})
	}
	cond := "version = :expected"
	values := map[string]types.AttributeValue{":expected": n(st.Version)}
	if st.Version == 0 {
		cond, values = "attribute_not_exists(PK)", nil
	}
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName:                 &h.table,
		Item:                      h.stateItem(next),
		ConditionExpression:       &cond,
		ExpressionAttributeValues: values,
	}})
	_, err := h.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		reasons := canceled.CancellationReasons
		if n := len(reasons); n == len(items) && aws.ToString(reasons[n-1].Code) == "None" {
			for i, r := range reasons {
				if aws.ToString(r.Code) == "ConditionalCheckFailed" && items[i].Update != nil {
					return st, fmt.Errorf("history of %q has no item for a purchase a refund updates (%v): rebuild it", st.UserID, items[i].Update.Key["SK"])
				}
			}
		}
		return st, fmt.Errorf("%w: %v", errStateMoved, err)
	}
	if err != nil {
		return st, fmt.Errorf("write history of %q: %w", st.UserID, err)
	}
	return next, nil
}

func (h *History) historyItem(e ledger.Entry) map[string]types.AttributeValue {
	item := dynamo.EntryAttributes(e)
	item["PK"], item["SK"] = s(dynamo.PartitionKey(e.UserID)), s(historySK(e.Version))
	return item
}

func (h *History) stateItem(st State) map[string]types.AttributeValue {
	item := h.key(st.UserID, stateSK)
	item["user_id"] = s(st.UserID)
	item["version"] = n(st.Version)
	for name, v := range map[string]decimal.Decimal{"balance": st.Balance, "granted": st.Granted, "spent": st.Spent, "refunded": st.Refunded, "adjusted": st.Adjusted} {
		item[name] = &types.AttributeValueMemberN{Value: v.String()}
	}
	item["last_entry_time"] = s(st.LastEntry.UTC().Format(timeLayout))
	item["update_time"] = s(h.now().UTC().Format(timeLayout))
	return item
}

// CatchUp brings every user whose history is behind the ledger up to date,
// from the ledger. It is how the projection recovers stream records it can
// no longer read (older than the stream keeps).
func (h *History) CatchUp(ctx context.Context) (users int, err error) {
	var mu sync.Mutex
	err = h.ledger.Accounts(ctx, 4, func(a ledger.Account) error {
		st, err := h.State(ctx, a.UserID)
		if err != nil || st.Version >= a.Version {
			return err
		}
		mu.Lock()
		users++
		mu.Unlock()
		return h.applyUser(ctx, a.UserID, nil, a.Version)
	})
	return users, err
}

// Rebuild replaces a user's history with one made from the ledger itself:
// the same items the stream would have written, a state recomputed from the
// entries, and no item the ledger does not have.
//
// It may run while the projector applies the stream. Each of its writes is a
// transaction guarded by the state's version, as the projector's are, so the
// two take turns on the state item. History up to the state's version is
// rewritten from the ledger, a purchase's refunded amount counting the
// refunds up to that version (the projector adds later ones); if the
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
	refunded := map[int64]decimal.Decimal{} // as the stream path has them at target
	st := State{UserID: user}
	for _, e := range entries[:target] {
		if e.Type == ledger.EntryRefund {
			refunded[e.PurchaseVersion] = refunded[e.PurchaseVersion].Add(e.Amount)
		}
		st = st.Add(e)
	}
	var ops []types.TransactWriteItem
	for _, e := range entries[min(*done, target):target] {
		if e.Type == ledger.EntryPurchase {
			e.RefundedAmount = refunded[e.Version]
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
			return fmt.Errorf("%w: %v", errStateMoved, err)
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
	guard.ExpressionAttributeValues = map[string]types.AttributeValue{":n": s("N")}
	return guard, math.MaxInt64, nil
}

// historyVersion is the version of a history item written by historyItem.
func historyVersion(item map[string]types.AttributeValue) int64 {
	sk, _ := item["SK"].(*types.AttributeValueMemberS)
	if sk == nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimPrefix(sk.Value, historyPrefix), 10, 64)
	return v
}

// Items returns all of a user's history items, oldest first.
func (h *History) Items(ctx context.Context, user string) ([]ledger.Entry, error) {
	items, _, err := h.list(ctx, user, listQuery{oldestFirst: true, limit: 1 << 30})
	return items, err
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

// Page sizes of List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

type historyToken struct {
	User    string `json:"u"`
	Version int64  `json:"v"` // the last version returned
	Filter  string `json:"f"` // the filter the token belongs to
}

// List returns a page of a user's history and the next page's token ("" on
// the last page). It reads the projection, which may trail the ledger by the
// projection lag.
func (h *History) List(ctx context.Context, user string, o ledger.HistoryQuery) ([]ledger.Entry, string, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return nil, "", err
	}
	switch {
	case o.PageSize < 0:
		return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageSize, "page_size must not be negative")
	case o.PageSize == 0:
		o.PageSize = DefaultPageSize
	case o.PageSize > MaxPageSize:
		o.PageSize = MaxPageSize
	}
	if !o.Start.IsZero() && !o.End.IsZero() && !o.Start.Before(o.End) {
		return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "start_time must be before end_time")
	}
	for _, t := range o.Types {
		switch t {
		case ledger.EntryGrant, ledger.EntryPurchase, ledger.EntryRefund, ledger.EntryAdjustment:
		default:
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "unknown entry type %q", t)
		}
	}
	q := listQuery{types: o.Types, start: o.Start, end: o.End, oldestFirst: o.OldestFirst, limit: o.PageSize + 1}
	filter := q.fingerprint()
	if o.PageToken != "" {
		var t historyToken
		b, err := base64.RawURLEncoding.DecodeString(o.PageToken)
		if err == nil {
			err = json.Unmarshal(b, &t)
		}
		// The service never gives a token after the largest version, nor
		// one before version 1 (newest first, that page is the last one):
		// the query's bounds would overflow or cross.
		if err != nil || t.User != user || t.Filter != filter || t.Version < 1 || t.Version == math.MaxInt64 ||
			(!o.OldestFirst && t.Version == 1) {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
				"page_token is not one this service gave for user %q with these filters", user)
		}
		q.after, q.before = t.Version, t.Version
	}
	items, _, err := h.list(ctx, user, q)
	if err != nil {
		return nil, "", err
	}
	if len(items) <= o.PageSize {
		return items, "", nil
	}
	items = items[:o.PageSize]
	b, _ := json.Marshal(historyToken{User: user, Version: items[len(items)-1].Version, Filter: filter})
	return items, base64.RawURLEncoding.EncodeToString(b), nil
}

type listQuery struct {
	types       []ledger.EntryType
	start, end  time.Time
	oldestFirst bool
	after       int64 // oldest first: versions above this
	before      int64 // newest first: versions below this (0: none)
	limit       int
}

func (q listQuery) fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "%v|%d|%d|%v", q.types, q.start.UnixNano(), q.end.UnixNano(), q.oldestFirst)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (h *History) list(ctx context.Context, user string, q listQuery) ([]ledger.Entry, bool, error) {
	lo, hi := historySK(1), historyPrefix+"99999999999999999999"
	if q.oldestFirst {
		lo = historySK(q.after + 1)
	} else if q.before > 0 {
		hi = historySK(q.before - 1)
	}
	values := map[string]types.AttributeValue{":pk": s(dynamo.PartitionKey(user)), ":lo": s(lo), ":hi": s(hi)}
	names := map[string]string{}
	var filters []string
	if len(q.types) > 0 {
		var in []string
		for i, t := range q.types {
			k := ":t" + strconv.Itoa(i)
			values[k] = s(string(t))
			in = append(in, k)
		}
		names["#type"] = "type"
		filters = append(filters, "#type IN ("+strings.Join(in, ", ")+")")
	}
	// create_time is stored to the microsecond. For such a time t,
	// t >= start and t < end hold exactly when they hold for the bounds
	// rounded up to the microsecond; cut down instead, an end just past an
	// entry's time would leave the entry out.
	if !q.start.IsZero() {
		values[":start"] = s(ceilMicrosecond(q.start).Format(timeLayout))
		filters = append(filters, "create_time >= :start")
	}
	if !q.end.IsZero() {
		values[":end"] = s(ceilMicrosecond(q.end).Format(timeLayout))
		filters = append(filters, "create_time < :end")
	}
	in := &dynamodb.QueryInput{
		TableName:                 &h.table,
		KeyConditionExpression:    aws.String("PK = :pk AND SK BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: values,
		ScanIndexForward:          aws.Bool(q.oldestFirst),
		Limit:                     aws.Int32(int32(min(max(q.limit, 25), 1000))),
	}
	if len(filters) > 0 {
		in.FilterExpression = aws.String(strings.Join(filters, " AND "))
		if len(names) > 0 {
			in.ExpressionAttributeNames = names
		}
	}
	var out []ledger.Entry
	for len(out) < q.limit {
		res, err := h.db.Query(ctx, in)
		if err != nil {
			return nil, false, fmt.Errorf("query history of %q: %w", user, err)
		}
		for _, item := range res.Items {
			e, _, err := dynamo.DecodeEntry(item)
			if err != nil {
				return nil, false, err
			}
			out = append(out, e)
		}
		if res.LastEvaluatedKey == nil {
			return out, false, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	return out, true, nil
}

// ceilMicrosecond is t in UTC, rounded up to the microsecond.
func ceilMicrosecond(t time.Time) time.Time {
	c := t.UTC().Truncate(time.Microsecond)
	if c.Before(t) {
		c = c.Add(time.Microsecond)
	}
	return c
}

// forEach runs f on every key with at most k at once; the first error
// cancels the rest and is returned.
func forEach(ctx context.Context, k int, keys []string, f func(string) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	for _, key := range keys {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(key); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
