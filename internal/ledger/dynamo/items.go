package dynamo

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Item layout of the ledger table. The user is the partition key of every
// item, so one user's account, entries and request records live together:
//
//	PK=ACCT#<user> SK=A                    account: balance, buckets, held and the open
//	                                       holds, pending and the pending lots, version,
//	                                       status, times
//	PK=ACCT#<user> SK=E#<version, 20 digits> entry
//	PK=ACCT#<user> SK=H#<version, 20 digits> hold record, by the version of its HOLD entry:
//	                                       what it was made with (request_id, amount,
//	                                       expire_time, order_id, create_time, draws), its
//	                                       state, and once resolved resolve_version (the
//	                                       entry that did) and a capture's captured_amount
//	PK=ACCT#<user> SK=R#<request_id>       request record: hash, type, amount, and the entry
//	                                       version, or the refusal (kind, reason, message)
//
// A hold is found by its request_id through the Authorize's request record,
// which names its HOLD entry's version, and so its hold record.
//
// Amounts are DynamoDB numbers written from canonical decimal strings. User
// and request ids cannot contain '#' (see ledger.ValidateUserID), so no id can
// reach into another item's key.
const (
	accountSK     = "A"
	entryPrefix   = "E#"
	requestPrefix = "R#"
	holdPrefix    = "H#"
	versionDigits = 20
	timeLayout    = "2006-01-02T15:04:05.000000Z" // fixed width, so it sorts as text
)

func partitionKey(user string) string { return "ACCT#" + user }

func key(user, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(partitionKey(user)), "SK": ddbattr.S(sk)}
}

// keyWith is key with its values from v, in a map made for size
// attributes (an item's, which then grows no more).
func keyWith(v *ddbattr.Values, user, sk string, size int) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, size)
	item["PK"], item["SK"] = v.S(partitionKey(user)), v.S(sk)
	return item
}

func accountKey(user string) map[string]types.AttributeValue { return key(user, accountSK) }

func entrySK(version int64) string { return versionSK(entryPrefix, version) }

// versionSK is prefix and version in versionDigits digits, zeros first
// (as fmt's %0*d writes it, without fmt).
func versionSK(prefix string, version int64) string {
	if version < 0 {
		return fmt.Sprintf("%s%0*d", prefix, versionDigits, version)
	}
	var b [2 + versionDigits]byte
	n := copy(b[:], prefix)
	digits := strconv.AppendInt(b[n:n], version, 10)
	if len(digits) >= versionDigits {
		return string(b[:n+len(digits)])
	}
	pad := versionDigits - len(digits)
	copy(b[n+pad:], digits)
	for i := range pad {
		b[n+i] = '0'
	}
	return string(b[:n+versionDigits])
}

func entryKey(user string, version int64) map[string]types.AttributeValue {
	return key(user, entrySK(version))
}

func holdSK(version int64) string { return versionSK(holdPrefix, version) }

func holdKey(user string, version int64) map[string]types.AttributeValue {
	return key(user, holdSK(version))
}

func requestKey(user, requestID string) map[string]types.AttributeValue {
	return key(user, requestPrefix+requestID)
}

// requestRecord is the idempotency record of a request_id: the request's
// hash and what it did, an entry or a final refusal.
type requestRecord struct {
	// What the record says of its request (Last is stored as last_version
	// only when it is not Version).
	ledger.RequestRecord
	Hash string

	Refunded decimal.Decimal // purchases, as a refund plans: the refunded amount it read (not stored)
	Reversed decimal.Decimal // grants, as a reversal plans: the reversed amount it read (not stored)
}

// refusalKinds are the kinds of a final refusal (ledger.Kind.Final) by the
// name a refusal record stores, which is the wire code's.
var refusalKinds = map[string]ledger.Kind{
	"failed_precondition": ledger.KindFailedPrecondition,
	"not_found":           ledger.KindNotFound,
}

// recordable returns the refusal in err if it is one a refusal record can
// hold: a final one, with a reason.
func recordable(err error) (*ledger.Error, bool) {
	e, ok := ledger.AsError(err)
	if !ok || !e.Kind.Final() || e.Reason == "" {
		return nil, false
	}
	for _, kind := range refusalKinds {
		if kind == e.Kind {
			return e, true
		}
	}
	return nil, false
}

func entryItem(e ledger.Entry) map[string]types.AttributeValue {
	// Its values in two blocks (a purchase's entry has about ten strings
	// and four numbers), its map made for them.
	v := ddbattr.MakeValues(10, 5)
	item := keyWith(&v, e.UserID, entrySK(e.Version), 16)
	item["entry_id"] = v.S(e.ID)
	item["user_id"] = v.S(e.UserID)
	item["version"] = v.Int(e.Version)
	item["type"] = v.S(string(e.Type))
	item["amount"] = v.Decimal(e.Amount)
	item["balance_after"] = v.Decimal(e.BalanceAfter)
	if e.RequestID != "" { // entries the ledger writes itself (expirations) have none
		item["request_id"] = v.S(e.RequestID)
	}
	item["create_time"] = v.S(formatTime(e.CreateTime))
	if !e.ExpireTime.IsZero() {
		item["expire_time"] = v.S(formatTime(e.ExpireTime))
	}
	if len(e.Draws) > 0 {
		item["draws"] = drawsItemWith(&v, e.Draws)
	}
	// Kinds and places: only when there are some, so that the items of a
	// program without kinds stay as they were, and items from before
	// kinds read as standard.
	if e.Kind != "" {
		item["kind"] = v.S(e.Kind)
	}
	if e.MerchantID != "" {
		item["merchant_id"] = v.S(e.MerchantID)
	}
	if e.Category != "" {
		item["category"] = v.S(e.Category)
	}
	if e.OrderID != "" {
		item["order_id"] = v.S(e.OrderID)
	}
	if len(e.Metadata) > 0 {
		md := make(map[string]types.AttributeValue, len(e.Metadata))
		for k, val := range e.Metadata {
			md[k] = v.S(val)
		}
		item["metadata"] = &types.AttributeValueMemberM{Value: md}
	}
	// What is held: only on the entries that move it or follow one that
	// did, so that the items of a user who never held stay as they were.
	if !e.HeldChange.IsZero() {
		item["held_change"] = v.Decimal(e.HeldChange)
	}
	if !e.HeldAfter.IsZero() {
		item["held_after"] = v.Decimal(e.HeldAfter)
	}
	if e.HoldRequestID != "" {
		item["hold_request_id"] = v.S(e.HoldRequestID)
	}
	if e.BudgetID != "" {
		item["budget_id"] = v.S(e.BudgetID)
	}
	if e.Refundable() {
		item["refunded_amount"] = v.Decimal(e.RefundedAmount)
	}
	// Pending points: only on the entries that move them or follow one
	// that did, as with what is held.
	if !e.PendingChange.IsZero() {
		item["pending_change"] = v.Decimal(e.PendingChange)
	}
	if !e.PendingAfter.IsZero() {
		item["pending_after"] = v.Decimal(e.PendingAfter)
	}
	if !e.EffectiveTime.IsZero() {
		item["effective_time"] = v.S(formatTime(e.EffectiveTime))
	}
	if e.GrantRequestID != "" {
		item["grant_request_id"] = v.S(e.GrantRequestID)
		item["grant_version"] = v.Int(e.GrantVersion)
	}
	if !e.ReversedAmount.IsZero() { // a grant's reversals add it (grantReversalUpdate)
		item["reversed_amount"] = v.Decimal(e.ReversedAmount)
	}
	switch e.Type {
	case ledger.EntryGrant, ledger.EntryPurchase, ledger.EntryExpiration, ledger.EntryHold, ledger.EntryCapture, ledger.EntryMaturation:
	case ledger.EntryReversal: // why, if the request said
		if e.Reason != "" {
			item["reason"] = v.S(e.Reason)
		}
	case ledger.EntryRefund:
		item["purchase_request_id"] = v.S(e.PurchaseRequestID)
		item["purchase_version"] = v.Int(e.PurchaseVersion)
	case ledger.EntryAdjustment, ledger.EntryRelease: // a release's reason: VOIDED or EXPIRED
		item["reason"] = v.S(e.Reason)
		if e.ExplainsBalance {
			item["explains_balance"] = &types.AttributeValueMemberBOOL{Value: true}
		}
	}
	return item
}

// neverKey names the never-expiring bucket in an account's buckets map.
const neverKey = "never"

// kindSeparator ends a kind's name in a bucket's key: a standard
// bucket's key is its expiry alone (as before kinds), another kind's is
// "<kind>/<expiry or never>". Kind ids hold no '/' (ledger.ValidateKindID).
const kindSeparator = "/"

func bucketKey(b ledger.Bucket) string {
	k := neverKey
	if !b.Expire.IsZero() {
		k = formatTime(b.Expire)
	}
	if b.Kind != "" {
		k = b.Kind + kindSeparator + k
	}
	return k
}

// drawsItem is a list of {expire_time, amount, kind} maps, in order; the
// standard kind is written as none.
func drawsItem(ds []ledger.Draw) types.AttributeValue {
	var v ddbattr.Values
	return drawsItemWith(&v, ds)
}

// drawsItemWith is drawsItem with its values from v.
func drawsItemWith(v *ddbattr.Values, ds []ledger.Draw) types.AttributeValue {
	l := make([]types.AttributeValue, len(ds))
	ms := make([]types.AttributeValueMemberM, len(ds))
	for i, d := range ds {
		m := make(map[string]types.AttributeValue, 3)
		m["amount"] = v.Decimal(d.Amount)
		if !d.Expire.IsZero() {
			m["expire_time"] = v.S(formatTime(d.Expire))
		}
		if d.Kind != "" {
			m["kind"] = v.S(d.Kind)
		}
		ms[i].Value = m
		l[i] = &ms[i]
	}
	return &types.AttributeValueMemberL{Value: l}
}

// bucketsItem is the account's buckets as a map from bucket key (kind and
// expiry, see bucketKey) to amount: one attribute, bounded by
// ledger.DefaultMaxBuckets keys.
//
// The standard never-expiring bucket is not written: it is the balance
// less the others and what is held, and an account whose points are
// standard and never expire (most, and every hot one so far) keeps no map
// at all, so that its every update stays as small as before points
// expired or had kinds. A map from before kinds has expiries alone as
// keys: standard buckets.
func bucketsItem(bs []ledger.Bucket) types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(bs))
	for _, b := range bs {
		if kept(b) {
			m[bucketKey(b)] = ddbattr.Decimal(b.Amount)
		}
	}
	return &types.AttributeValueMemberM{Value: m}
}

// kept says whether the account item keeps bucket b in its map: all but
// the standard never-expiring one.
func kept(b ledger.Bucket) bool { return !b.Expire.IsZero() || b.Kind != "" }

func requestItem(m ledger.Mutation, e ledger.Entry, last int64) map[string]types.AttributeValue {
	v := ddbattr.MakeValues(6, 3)
	item := requestAttributes(&v, m, e.CreateTime)
	item["version"] = v.Int(e.Version)
	if last > e.Version {
		item["last_version"] = v.Int(last)
	}
	return item
}

// refusalItem is the request record of m refused with refusal (see
// recordable): it names no entry.
func refusalItem(m ledger.Mutation, refusal *ledger.Error, now time.Time) map[string]types.AttributeValue {
	var v ddbattr.Values
	item := requestAttributes(&v, m, now)
	for name, kind := range refusalKinds {
		if kind == refusal.Kind {
			item["refusal_kind"] = ddbattr.S(name)
		}
	}
	item["refusal_reason"] = ddbattr.S(refusal.Reason)
	item["refusal_message"] = ddbattr.S(refusal.Message)
	if len(refusal.Metadata) > 0 {
		md := map[string]types.AttributeValue{}
		for k, v := range refusal.Metadata {
			md[k] = ddbattr.S(v)
		}
		item["refusal_metadata"] = &types.AttributeValueMemberM{Value: md}
	}
	return item
}

// requestAttributes are the attributes every request record has, their
// values from v, in a map made for a request record's: eight, with its
// version (a map of up to eight is one group, more a table of them).
func requestAttributes(v *ddbattr.Values, m ledger.Mutation, now time.Time) map[string]types.AttributeValue {
	item := keyWith(v, m.UserID, requestPrefix+m.RequestID, 8)
	item["request_id"] = v.S(m.RequestID)
	item["request_hash"] = v.S(m.Hash())
	item["type"] = v.S(string(m.Type))
	item["amount"] = v.Decimal(m.Amount)
	item["create_time"] = v.S(formatTime(now))
	return item
}

func decodeAccount(item map[string]types.AttributeValue) (ledger.Account, bool, error) {
	if len(item) == 0 {
		return ledger.Account{}, false, nil
	}
	d := decoder{item: item}
	a := ledger.Account{
		UserID:     d.str("user_id"),
		Balance:    d.num("balance"),
		Version:    d.int("version"),
		Status:     ledger.Status(d.str("status")),
		CreateTime: d.time("create_time"),
		UpdateTime: d.time("update_time"),
	}
	if _, ok := item["buckets"]; ok {
		a.Buckets = d.buckets("buckets")
	}
	// An account that never held has neither (nor one from before holds).
	if _, ok := item["held"]; ok {
		a.Held = d.num("held")
	}
	if _, ok := item["holds"]; ok {
		a.Holds = d.holds("holds", a.UserID)
	}
	// An account that never had points pending has neither.
	a.Pending = d.optNum("pending")
	if _, ok := item["pending_lots"]; ok {
		a.PendingLots = d.lots("pending_lots")
	}
	// The never-expiring bucket is what the expiring ones and the holds
	// leave of the balance (all of it for an account with neither, or from
	// before points expired).
	never := a.Balance.Sub(a.Held)
	for _, b := range a.Buckets {
		never = never.Sub(b.Amount)
	}
	if never.IsPositive() {
		a.Buckets = ledger.SortBuckets(append(a.Buckets, ledger.Bucket{Amount: never}))
	}
	return a, true, d.err("account")
}

// accountAttributes are the attributes of an account item that hold a, as
// decodeAccount reads them, without its key: what a snapshot of the
// aggregate keeps (asof.go). accountUpdate writes the same attributes by
// parts; a field the aggregate gains goes into both.
func accountAttributes(a ledger.Account) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		"user_id":     ddbattr.S(a.UserID),
		"balance":     ddbattr.Decimal(a.Balance),
		"version":     ddbattr.Int(a.Version),
		"status":      ddbattr.S(string(cmp.Or(a.Status, ledger.StatusActive))),
		"create_time": ddbattr.S(formatTime(a.CreateTime)),
		"update_time": ddbattr.S(formatTime(a.UpdateTime)),
	}
	if expires(a.Buckets) {
		m["buckets"] = bucketsItem(a.Buckets)
	}
	if len(a.Holds) > 0 {
		m["held"], m["holds"] = ddbattr.Decimal(a.Held), holdsItem(a.Holds)
	}
	if len(a.PendingLots) > 0 {
		m["pending"], m["pending_lots"] = ddbattr.Decimal(a.Pending), lotsItem(a.PendingLots)
	}
	return m
}

// EntryAttributes are the attributes of an entry item without its key: the
// projection stores history items with exactly these.
func EntryAttributes(e ledger.Entry) map[string]types.AttributeValue {
	item := entryItem(e)
	delete(item, "PK")
	delete(item, "SK")
	return item
}

// DecodeEntry reads an entry from its item's attributes (a stream image, a
// history item); ok is false for an empty item.
func DecodeEntry(item map[string]types.AttributeValue) (e ledger.Entry, ok bool, err error) {
	return decodeEntry(item)
}

// IsEntryKey says whether a ledger table sort key is an entry's.
func IsEntryKey(sk string) bool { return strings.HasPrefix(sk, entryPrefix) }

// PartitionKey is the partition key of a user's items.
func PartitionKey(user string) string { return partitionKey(user) }

func decodeEntry(item map[string]types.AttributeValue) (ledger.Entry, bool, error) {
	if len(item) == 0 {
		return ledger.Entry{}, false, nil
	}
	d := decoder{item: item}
	e := ledger.Entry{
		ID:           d.str("entry_id"),
		UserID:       d.str("user_id"),
		Version:      d.int("version"),
		Type:         ledger.EntryType(d.str("type")),
		Amount:       d.num("amount"),
		BalanceAfter: d.num("balance_after"),
		RequestID:    d.optStr("request_id"),
		OrderID:      d.optStr("order_id"),
		CreateTime:   d.time("create_time"),
		Metadata:     d.strMap("metadata"),
		Draws:        d.draws("draws"),
		Kind:         d.optStr("kind"),
		MerchantID:   d.optStr("merchant_id"),
		Category:     d.optStr("category"),
	}
	if _, ok := item["expire_time"]; ok {
		e.ExpireTime = d.time("expire_time")
	}
	e.HeldChange = d.optNum("held_change")
	e.HeldAfter = d.optNum("held_after")
	e.HoldRequestID = d.optStr("hold_request_id")
	e.BudgetID = d.optStr("budget_id")
	if e.Refundable() {
		e.RefundedAmount = d.num("refunded_amount")
	}
	e.PendingChange = d.optNum("pending_change")
	e.PendingAfter = d.optNum("pending_after")
	if _, ok := item["effective_time"]; ok {
		e.EffectiveTime = d.time("effective_time")
	}
	if e.GrantRequestID = d.optStr("grant_request_id"); e.GrantRequestID != "" {
		e.GrantVersion = d.int("grant_version")
	}
	e.ReversedAmount = d.optNum("reversed_amount")
	switch e.Type {
	case ledger.EntryGrant, ledger.EntryPurchase, ledger.EntryExpiration, ledger.EntryHold, ledger.EntryCapture, ledger.EntryMaturation:
	case ledger.EntryReversal:
		e.Reason = d.optStr("reason")
	case ledger.EntryRefund:
		e.PurchaseRequestID = d.str("purchase_request_id")
		e.PurchaseVersion = d.int("purchase_version")
	case ledger.EntryAdjustment, ledger.EntryRelease:
		e.Reason = d.str("reason")
		b, _ := item["explains_balance"].(*types.AttributeValueMemberBOOL)
		e.ExplainsBalance = b != nil && b.Value
	}
	return e, true, d.err("entry")
}

// decodeRequest reads a request record. A refusal record must say which
// final refusal it holds, with a reason; any other record, its entry's
// version.
func decodeRequest(item map[string]types.AttributeValue) (requestRecord, error) {
	d := decoder{item: item}
	r := requestRecord{Hash: d.str("request_hash"), RequestRecord: ledger.RequestRecord{
		Type:   ledger.EntryType(d.str("type")),
		Amount: d.num("amount"),
	}}
	if _, refused := item["refusal_kind"]; refused {
		name := d.str("refusal_kind")
		kind, ok := refusalKinds[name]
		if !ok {
			d.fail("refusal_kind", fmt.Sprintf("%q is not a final refusal", name))
		}
		r.Refusal = &ledger.Error{Kind: kind, Reason: d.str("refusal_reason"), Message: d.optStr("refusal_message")}
		if r.Refusal.Reason == "" {
			d.fail("refusal_reason", "empty")
		}
		if md, ok := item["refusal_metadata"].(*types.AttributeValueMemberM); ok {
			r.Refusal.Metadata = map[string]string{}
			for k, v := range md.Value {
				if s, ok := v.(*types.AttributeValueMemberS); ok {
					r.Refusal.Metadata[k] = s.Value
				}
			}
		}
	} else {
		r.Version = d.int("version")
		r.Last = r.Version
		if _, ok := item["last_version"]; ok {
			r.Last = d.int("last_version")
		}
	}
	return r, d.err("request record")
}

// draws reads a list of draws; absent: none.
func (d *decoder) draws(name string) []ledger.Draw {
	v, ok := d.item[name]
	if !ok {
		return nil
	}
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		d.fail(name, "not a list")
		return nil
	}
	out := make([]ledger.Draw, 0, len(l.Value))
	for _, x := range l.Value {
		m, ok := x.(*types.AttributeValueMemberM)
		if !ok {
			d.fail(name, "an element is not a map")
			return nil
		}
		inner := decoder{item: m.Value}
		dr := ledger.Draw{Amount: inner.num("amount"), Kind: inner.optStr("kind")}
		if _, ok := m.Value["expire_time"]; ok {
			dr.Expire = inner.time("expire_time")
		}
		if inner.first != nil {
			d.fail(name, inner.first.Error())
			return nil
		}
		out = append(out, dr)
	}
	return out
}

// buckets reads an account's buckets map, in spending order.
func (d *decoder) buckets(name string) []ledger.Bucket {
	m, ok := d.mapAttr(name)
	if !ok {
		return nil
	}
	out := make([]ledger.Bucket, 0, len(m))
	for k, v := range m {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			d.fail(name, "a value is not a number")
			return nil
		}
		amount, err := decimal.NewFromString(n.Value)
		if err != nil {
			d.fail(name, err.Error())
			return nil
		}
		b := ledger.Bucket{Amount: amount}
		if kind, rest, ok := strings.Cut(k, kindSeparator); ok {
			b.Kind, k = kind, rest
		}
		if k != neverKey {
			if b.Expire, err = time.Parse(timeLayout, k); err != nil {
				d.fail(name, err.Error())
				return nil
			}
		}
		out = append(out, b)
	}
	return ledger.SortBuckets(out)
}
