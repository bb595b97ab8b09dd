package dynamo

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// The items of holds and pending points (see the layout in items.go): a
// hold's record, the account's open holds and its pending lots.

// holdAttributes are what the account and a hold record both keep of a
// hold: all it was made with.
func holdAttributes(h ledger.Hold) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		"amount":      ddbattr.Decimal(h.Amount),
		"expire_time": ddbattr.S(formatTime(h.ExpireTime)),
		"create_time": ddbattr.S(formatTime(h.CreateTime)),
		"version":     ddbattr.Int(h.Version),
	}
	if h.OrderID != "" {
		m["order_id"] = ddbattr.S(h.OrderID)
	}
	if len(h.Draws) > 0 {
		m["draws"] = drawsItem(h.Draws)
	}
	if h.MerchantID != "" {
		m["merchant_id"] = ddbattr.S(h.MerchantID)
	}
	if h.Category != "" {
		m["category"] = ddbattr.S(h.Category)
	}
	return m
}

// holdsItem is the account's open holds as a map by request_id: one
// attribute, bounded by the store's MaxHolds keys.
func holdsItem(hs []ledger.Hold) types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(hs))
	for _, h := range hs {
		m[h.RequestID] = &types.AttributeValueMemberM{Value: holdAttributes(h)}
	}
	return &types.AttributeValueMemberM{Value: m}
}

// holdItem is the record of hold h (see the layout above): what it was
// made with, its state, and once resolved, by which entry and for what.
func holdItem(h ledger.Hold) map[string]types.AttributeValue {
	item := holdAttributes(h)
	maps.Copy(item, holdKey(h.UserID, h.Version))
	item["request_id"] = ddbattr.S(h.RequestID)
	item["user_id"] = ddbattr.S(h.UserID)
	item["state"] = ddbattr.S(string(h.State))
	if h.ResolveVersion > 0 {
		item["resolve_version"] = ddbattr.Int(h.ResolveVersion)
	}
	if h.State == ledger.HoldCaptured {
		item["captured_amount"] = ddbattr.Decimal(h.CapturedAmount)
	}
	return item
}

// decodeHold reads a hold record.
func decodeHold(item map[string]types.AttributeValue) (ledger.Hold, error) {
	d := decoder{item: item}
	h := d.hold(d.str("request_id"), d.str("user_id"))
	h.State = ledger.HoldState(d.str("state"))
	switch h.State {
	case ledger.HoldHeld, ledger.HoldCaptured, ledger.HoldVoided, ledger.HoldExpired:
	default:
		d.fail("state", fmt.Sprintf("%q is not a hold state", h.State))
	}
	if _, ok := item["resolve_version"]; ok {
		h.ResolveVersion = d.int("resolve_version")
	}
	h.CapturedAmount = d.optNum("captured_amount")
	return h, d.err("hold record")
}

// hold reads what the account and a hold record both keep of a hold (see
// holdAttributes); it is held.
func (d *decoder) hold(requestID, user string) ledger.Hold {
	return ledger.Hold{
		RequestID:  requestID,
		UserID:     user,
		Amount:     d.num("amount"),
		State:      ledger.HoldHeld,
		ExpireTime: d.time("expire_time"),
		OrderID:    d.optStr("order_id"),
		CreateTime: d.time("create_time"),
		Version:    d.int("version"),
		Draws:      d.draws("draws"),
		MerchantID: d.optStr("merchant_id"),
		Category:   d.optStr("category"),
	}
}

// holds reads the account's open holds, in version order.
func (d *decoder) holds(name, user string) []ledger.Hold {
	m, ok := d.mapAttr(name)
	if !ok {
		return nil
	}
	out := make([]ledger.Hold, 0, len(m))
	for id, v := range m {
		hm, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			d.fail(name+"."+id, "not a map")
			return nil
		}
		inner := decoder{item: hm.Value}
		h := inner.hold(id, user)
		if inner.first != nil {
			d.fail(name+"."+id, inner.first.Error())
			return nil
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b ledger.Hold) int { return cmp.Compare(a.Version, b.Version) })
	return out
}

// lotsItem is the account's pending lots as a map by the request_id of
// the grant that made each: one attribute, bounded by the store's
// MaxPending keys.
func lotsItem(ls []ledger.PendingLot) types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(ls))
	for _, l := range ls {
		lot := map[string]types.AttributeValue{
			"amount":         ddbattr.Decimal(l.Amount),
			"effective_time": ddbattr.S(formatTime(l.EffectiveTime)),
			"version":        ddbattr.Int(l.Version),
		}
		if !l.ExpireTime.IsZero() {
			lot["expire_time"] = ddbattr.S(formatTime(l.ExpireTime))
		}
		if l.Kind != "" {
			lot["kind"] = ddbattr.S(l.Kind)
		}
		m[l.GrantRequestID] = &types.AttributeValueMemberM{Value: lot}
	}
	return &types.AttributeValueMemberM{Value: m}
}

// lots reads the account's pending lots, in version order.
func (d *decoder) lots(name string) []ledger.PendingLot {
	m, ok := d.mapAttr(name)
	if !ok {
		return nil
	}
	out := make([]ledger.PendingLot, 0, len(m))
	for id, v := range m {
		lm, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			d.fail(name+"."+id, "not a map")
			return nil
		}
		inner := decoder{item: lm.Value}
		l := ledger.PendingLot{GrantRequestID: id, Amount: inner.num("amount"), EffectiveTime: inner.time("effective_time"), Version: inner.int("version"), Kind: inner.optStr("kind")}
		if _, ok := lm.Value["expire_time"]; ok {
			l.ExpireTime = inner.time("expire_time")
		}
		if inner.first != nil {
			d.fail(name+"."+id, inner.first.Error())
			return nil
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b ledger.PendingLot) int { return cmp.Compare(a.Version, b.Version) })
	return out
}
