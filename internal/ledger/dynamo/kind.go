package dynamo

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Point kinds (ledger.PointKinds) live in the ledger table, in one
// partition of their own, as budgets do (budget.go):
//
//	PK=KINDS  SK=K#<kind_id>               a kind: description, priority, merchants,
//	                                       categories, excluded_categories, create_time,
//	                                       update_time
//	PK=KINDS  SK=R#<kind_id>#<request_id>  a creation's or an update's request record: its hash
//	PK=KINDS  SK=N                         how many kinds there are (TOO_MANY_KINDS)
//
// The ledger table rather than a new one: no migration, and the kinds are
// few (ledger.DefaultMaxKinds), read all at once by one Query. No scan of
// the ledger reads them as users (those take SK "A" and "E#1" only), and
// the stream's consumers skip them as they skip budgets' items (no entry
// key).
//
// The write path never reads them: each Ledger caches the kinds
// (kindCache) and decides on its snapshot. A kind the snapshot does not
// know, named by a mutation or held by the account, makes it read the
// kinds again before deciding, so a kind created on another instance is
// usable here once CreatePointKind has answered, and a credit of an
// unknown kind is refused only after a read. A change of a kind's rules
// reaches every instance within twice Options.KindRefresh: a snapshot
// older than KindRefresh is read again in the background, one older than
// twice that before the mutation is decided.
const (
	kindsPartition = "KINDS"
	kindPrefix     = "K#"
	kindCountSK    = "N"
	// DefaultKindRefresh is how often a Ledger reads the kinds again.
	DefaultKindRefresh = 10 * time.Second
	// MaxKindRefresh is the longest KindRefresh allowed: twice it is
	// within ledger.MaxKindRefresh, the delay the audit allows a change.
	MaxKindRefresh = ledger.MaxKindRefresh / 2
)

func kindKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(kindsPartition), "SK": ddbattr.S(kindPrefix + id)}
}

func kindRequestKey(id, requestID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(kindsPartition), "SK": ddbattr.S(requestPrefix + id + "#" + requestID)}
}

func kindCountKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(kindsPartition), "SK": ddbattr.S(kindCountSK)}
}

// kindCache is a Ledger's snapshot of the kinds.
type kindCache struct {
	refresh time.Duration
	max     int

	mu         sync.Mutex
	kinds      ledger.Kinds
	loaded     time.Time // zero: never
	refreshing bool
}

func strList(vs []string) types.AttributeValue {
	l := make([]types.AttributeValue, len(vs))
	for i, v := range vs {
		l[i] = ddbattr.S(v)
	}
	return &types.AttributeValueMemberL{Value: l}
}

func (d *decoder) strList(name string) []string {
	v, ok := d.item[name]
	if !ok {
		return nil
	}
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		d.fail(name, "not a list")
		return nil
	}
	out := make([]string, 0, len(l.Value))
	for _, x := range l.Value {
		s, ok := x.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(name, "an element is not a string")
			return nil
		}
		out = append(out, s.Value)
	}
	return out
}

// kindAttributes are a kind's rules as its item keeps them; empty lists
// are left out.
func kindAttributes(k ledger.PointKind) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		"kind_id":     ddbattr.S(k.ID),
		"description": ddbattr.S(k.Description),
		"priority":    ddbattr.Int(int64(k.Priority)),
	}
	for name, l := range map[string][]string{"merchants": k.Merchants, "categories": k.Categories, "excluded_categories": k.ExcludedCategories} {
		if len(l) > 0 {
			m[name] = strList(l)
		}
	}
	return m
}

func decodeKind(item map[string]types.AttributeValue) (ledger.PointKind, error) {
	d := decoder{item: item}
	k := ledger.PointKind{
		ID: d.str("kind_id"), Description: d.optStr("description"), Priority: int(d.int("priority")),
		Merchants: d.strList("merchants"), Categories: d.strList("categories"), ExcludedCategories: d.strList("excluded_categories"),
		CreateTime: d.time("create_time"), UpdateTime: d.time("update_time"),
	}
	return k, d.err("point kind")
}

// CreatePointKind puts the kind, its request record and the count in one
// transaction, under conditions that the kind and the record are new and
// the count is below the bound.
func (l *Ledger) CreatePointKind(ctx context.Context, c ledger.KindChange) (ledger.PointKind, bool, error) {
	now := formatTime(l.now())
	max := cmp.Or(l.kinds.max, ledger.DefaultMaxKinds)
	attrs := kindAttributes(c.Kind)
	attrs["create_time"], attrs["update_time"] = ddbattr.S(now), ddbattr.S(now)
	items := []types.TransactWriteItem{
		{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"), Item: with(kindKey(c.Kind.ID), attrs)}},
		l.kindRequestPut(c),
		{Update: &types.Update{TableName: &l.table, Key: kindCountKey(),
			UpdateExpression:          aws.String("SET kinds = if_not_exists(kinds, :zero) + :one"),
			ConditionExpression:       aws.String("attribute_not_exists(kinds) OR kinds < :max"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":zero": ddbattr.Int(0), ":one": ddbattr.Int(1), ":max": ddbattr.Int(int64(max))}}},
	}
	reasons, err := l.budgetTransaction(ctx, items)
	switch {
	case err != nil:
		return ledger.PointKind{}, false, err
	case reasons == nil:
		return l.readKindAfterChange(ctx, c.Kind.ID)
	case failed(reasons, 1):
		return l.kindReplay(ctx, c, reasons[1].Item)
	case failed(reasons, 0):
		return ledger.PointKind{}, false, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonKindExists, "point kind %q exists already", c.Kind.ID)
	case failed(reasons, 2):
		return ledger.PointKind{}, false, ledger.TooManyKinds(max)
	}
	return ledger.PointKind{}, false, fmt.Errorf("create point kind %q cancelled: %v", c.Kind.ID, codes(reasons))
}

// UpdatePointKind replaces an existing kind's rules, with its request
// record, in one transaction.
func (l *Ledger) UpdatePointKind(ctx context.Context, c ledger.KindChange) (ledger.PointKind, bool, error) {
	attrs := kindAttributes(c.Kind)
	values := map[string]types.AttributeValue{":now": ddbattr.S(formatTime(l.now()))}
	set := []string{"update_time = :now"}
	for name, v := range attrs {
		set = append(set, name+" = :"+name)
		values[":"+name] = v
	}
	remove := ""
	for _, name := range []string{"merchants", "categories", "excluded_categories"} {
		if _, ok := attrs[name]; !ok {
			remove += ", " + name
		}
	}
	slices.Sort(set) // one expression for one change
	update := "SET " + strings.Join(set, ", ")
	if remove != "" {
		update += " REMOVE " + remove[2:]
	}
	items := []types.TransactWriteItem{
		{Update: &types.Update{TableName: &l.table, Key: kindKey(c.Kind.ID), UpdateExpression: aws.String(update),
			ConditionExpression: aws.String("attribute_exists(PK)"), ExpressionAttributeValues: values}},
		l.kindRequestPut(c),
	}
	reasons, err := l.budgetTransaction(ctx, items)
	switch {
	case err != nil:
		return ledger.PointKind{}, false, err
	case reasons == nil:
		return l.readKindAfterChange(ctx, c.Kind.ID)
	case failed(reasons, 1):
		return l.kindReplay(ctx, c, reasons[1].Item)
	case failed(reasons, 0):
		return ledger.PointKind{}, false, ledger.PointKindNotFound(c.Kind.ID)
	}
	return ledger.PointKind{}, false, fmt.Errorf("update point kind %q cancelled: %v", c.Kind.ID, codes(reasons))
}

// readKindAfterChange reads the kind a change wrote, and reads all the
// kinds into this instance's cache, so that it decides with the change at
// once.
func (l *Ledger) readKindAfterChange(ctx context.Context, id string) (ledger.PointKind, bool, error) {
	ks, err := l.loadKinds(ctx)
	if err != nil {
		return ledger.PointKind{}, false, err
	}
	k, ok := ks[id]
	if !ok {
		return ledger.PointKind{}, false, fmt.Errorf("point kind %q not found after it was written", id)
	}
	return k, false, nil
}

// kindReplay answers a change whose request record exists: the kind as it
// is now, Replayed, if it was the same change; ALREADY_EXISTS if another.
func (l *Ledger) kindReplay(ctx context.Context, c ledger.KindChange, old map[string]types.AttributeValue) (ledger.PointKind, bool, error) {
	if len(old) == 0 {
		var err error
		if old, err = l.get(ctx, kindRequestKey(c.Kind.ID, c.RequestID)); err != nil {
			return ledger.PointKind{}, false, fmt.Errorf("get request %q of point kind %q: %w", c.RequestID, c.Kind.ID, err)
		}
	}
	d := decoder{item: old}
	if was := d.str("request_hash"); d.err("point kind request") != nil || was != c.Hash() {
		return ledger.PointKind{}, false, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused,
			"request_id %q of point kind %q was used for another change", c.RequestID, c.Kind.ID)
	}
	k, err := l.GetPointKind(ctx, c.Kind.ID)
	return k, true, err
}

// GetPointKind reads one kind, consistently.
func (l *Ledger) GetPointKind(ctx context.Context, id string) (ledger.PointKind, error) {
	if id == "" {
		return ledger.Standard, nil
	}
	item, err := l.get(ctx, kindKey(id))
	if err != nil {
		return ledger.PointKind{}, fmt.Errorf("get point kind %q: %w", id, err)
	}
	if len(item) == 0 {
		return ledger.PointKind{}, ledger.PointKindNotFound(id)
	}
	return decodeKind(item)
}

// ListPointKinds reads every kind, consistently: standard first, then by
// kind id.
func (l *Ledger) ListPointKinds(ctx context.Context) ([]ledger.PointKind, error) {
	ks, err := l.readKinds(ctx)
	if err != nil {
		return nil, err
	}
	out := append([]ledger.PointKind{ledger.Standard}, ks...)
	return out, nil
}

// readKinds queries the kinds' partition, consistently, in kind id order.
func (l *Ledger) readKinds(ctx context.Context) ([]ledger.PointKind, error) {
	var out []ledger.PointKind
	var start map[string]types.AttributeValue
	for {
		res, err := l.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &l.table,
			KeyConditionExpression:    aws.String("PK = :pk AND begins_with(SK, :k)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(kindsPartition), ":k": ddbattr.S(kindPrefix)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("query point kinds: %w", err)
		}
		for _, item := range res.Items {
			k, err := decodeKind(item)
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return out, nil
		}
	}
}

// loadKinds reads the kinds into the cache and returns them.
func (l *Ledger) loadKinds(ctx context.Context) (ledger.Kinds, error) {
	at := l.now()
	list, err := l.readKinds(ctx)
	if err != nil {
		return nil, err
	}
	ks := ledger.NewKinds(list...)
	c := &l.kinds
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.After(c.loaded) || c.loaded.IsZero() {
		c.kinds, c.loaded = ks, at
	}
	return ks, nil
}

// Kinds is this instance's snapshot of the kinds (api.KindSource): read
// again in the background once older than the refresh interval, and
// before answering once older than twice that.
func (l *Ledger) Kinds(ctx context.Context) (ledger.Kinds, error) {
	c := &l.kinds
	c.mu.Lock()
	ks, loaded, refreshing := c.kinds, c.loaded, c.refreshing
	age := l.now().Sub(loaded)
	stale := !loaded.IsZero() && age > c.refresh && age <= 2*c.refresh
	if stale && !refreshing {
		c.refreshing = true
	}
	c.mu.Unlock()
	switch {
	case loaded.IsZero() || age > 2*c.refresh:
		return l.loadKinds(ctx)
	case stale && !refreshing:
		go l.refreshKinds()
	}
	return ks, nil
}

// refreshKinds reads the kinds in the background, off the write path.
func (l *Ledger) refreshKinds() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.loadKinds(ctx); err != nil {
		l.log.Warn("reading the point kinds failed; the last ones read are used", "error", err)
	}
	l.kinds.mu.Lock()
	l.kinds.refreshing = false
	l.kinds.mu.Unlock()
}

// kindsFor is the snapshot a mutation m of acct is decided on: read again
// first if it misses a kind they name.
func (l *Ledger) kindsFor(ctx context.Context, acct ledger.Account, m ledger.Mutation) (ledger.Kinds, error) {
	ks, err := l.Kinds(ctx)
	if err != nil {
		return nil, err
	}
	if len(ks.Missing(acct, m)) == 0 {
		return ks, nil
	}
	return l.loadKinds(ctx)
}

var _ ledger.PointKinds = (*Ledger)(nil)

// kindRequestPut records c's request id with its hash, unless recorded
// before (then the item comes back, for kindReplay): the second item of
// both a kind's creation and its update.
func (l *Ledger) kindRequestPut(c ledger.KindChange) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: &l.table, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		Item:                                with(kindRequestKey(c.Kind.ID, c.RequestID), map[string]types.AttributeValue{"request_hash": ddbattr.S(c.Hash())})}}
}
