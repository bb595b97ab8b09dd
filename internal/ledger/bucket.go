package ledger

import (
	"cmp"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// Bucket is what an account holds of points of one kind that expire at one
// time. Credits of the same kind and expiry merge, so an account holds one
// bucket per distinct (kind, expiry), not one per grant.
type Bucket struct {
	Expire time.Time       // zero: never expires
	Amount decimal.Decimal // what is left
	Kind   string          // "": standard (kind.go)
}

// Draw is what one entry took from (or, for a refund, gave back to) the
// bucket of one kind and expiry time.
type Draw struct {
	Expire time.Time // zero: the never-expiring bucket
	Amount decimal.Decimal
	Kind   string // "": standard
}

// live says whether points of expiry e may be spent at t: strictly before
// their expiry.
func live(e, t time.Time) bool { return e.IsZero() || t.Before(e) }

// order is the order an account keeps its buckets in: soonest expiry
// first, never last, then by kind. (Spending order also weighs the kinds'
// priorities: Kinds.SpendingOrder.)
func order(a, b Bucket) int {
	if c := before(a.Expire, b.Expire); c != 0 {
		return c
	}
	return cmp.Compare(a.Kind, b.Kind)
}

// before orders expiry times for spending: soonest first, never last.
func before(a, b time.Time) int {
	switch {
	case a.Equal(b):
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	case a.Before(b):
		return -1
	}
	return 1
}

// credit adds d's amount to the bucket of d's kind and expiry, keeping
// the order.
func credit(bs []Bucket, d Draw) []Bucket {
	key := Bucket{Expire: d.Expire, Kind: d.Kind}
	i, found := slices.BinarySearchFunc(bs, key, order)
	if found {
		bs = slices.Clone(bs)
		bs[i].Amount = bs[i].Amount.Add(d.Amount)
		return bs
	}
	return slices.Insert(slices.Clone(bs), i, Bucket{Expire: d.Expire.UTC(), Amount: d.Amount, Kind: d.Kind})
}

// debit takes d's amount from the bucket of d's kind and expiry; an
// emptied bucket goes. A draw on a bucket the account does not hold
// (entries written before buckets existed) takes from the buckets in
// their order.
func debit(bs []Bucket, d Draw) []Bucket {
	i := slices.IndexFunc(bs, func(b Bucket) bool { return b.Kind == d.Kind && b.Expire.Equal(d.Expire) })
	amount := d.Amount
	if i < 0 {
		for _, x := range spend(bs, amount) {
			if j := slices.IndexFunc(bs, func(b Bucket) bool { return b.Kind == x.Kind && b.Expire.Equal(x.Expire) }); j >= 0 {
				bs = debit(bs, x) // found: no deeper
			}
		}
		return bs
	}
	bs = slices.Clone(bs)
	bs[i].Amount = bs[i].Amount.Sub(amount)
	if !bs[i].Amount.IsPositive() {
		bs = slices.Delete(bs, i, i+1)
	}
	return bs
}

// spend says what a debit of amount draws of bs, in their order (the
// caller puts them in spending order: Kinds.Eligible). The caller has
// checked that the buckets cover it.
func spend(bs []Bucket, amount decimal.Decimal) []Draw {
	var draws []Draw
	for _, b := range bs {
		if !amount.IsPositive() {
			break
		}
		take := decimal.Min(b.Amount, amount)
		draws = append(draws, Draw{Expire: b.Expire, Amount: take, Kind: b.Kind})
		amount = amount.Sub(take)
	}
	return draws
}

// giveBack says where a refund of amount goes: back to the buckets its
// purchase drew (draws), last drawn first, after what earlier refunds
// (refunded) gave back.
func giveBack(draws []Draw, refunded, amount decimal.Decimal) []Draw {
	var back []Draw
	for i := len(draws) - 1; i >= 0 && amount.IsPositive(); i-- {
		room := draws[i].Amount
		if refunded.IsPositive() { // this draw was given back, wholly or in part, by earlier refunds
			used := decimal.Min(room, refunded)
			room, refunded = room.Sub(used), refunded.Sub(used)
		}
		if !room.IsPositive() {
			continue
		}
		give := decimal.Min(room, amount)
		back = append(back, Draw{Expire: draws[i].Expire, Amount: give, Kind: draws[i].Kind})
		amount = amount.Sub(give)
	}
	if amount.IsPositive() {
		// A purchase written before buckets existed has no draws: what it
		// took came from standard points that never expire.
		back = append(back, Draw{Amount: amount})
	}
	return back
}

// sum is the total of the draws.
func sum(ds []Draw) decimal.Decimal {
	t := decimal.Zero
	for _, d := range ds {
		t = t.Add(d.Amount)
	}
	return t
}

// At is the account as it is at t: the pending grants due by then matured,
// the holds and buckets due released and expired, as the user's next
// mutation would write them. A
// balance read answers At(now), so expiry is decided by time, not by when
// the ledger writes it down.
func (a Account) At(t time.Time) Account {
	var discard []Entry
	return a.expire(Time(a, t), &discard)
}

// Spendable is acct's balance at t: what it holds in buckets that have
// not expired, and in holds that have not (see At).
func (a Account) Spendable(t time.Time) decimal.Decimal { return a.At(t).Balance }

// Expiring is the account's buckets still live at t that will expire, soonest
// first, at most n of them.
func (a Account) Expiring(t time.Time, n int) []Bucket {
	var out []Bucket
	for _, b := range a.At(t).Buckets {
		if len(out) == n {
			break
		}
		if !b.Expire.IsZero() {
			out = append(out, b)
		}
	}
	return out
}

// NextDue is the soonest time something of the account falls due by time:
// a bucket's or an open hold's expiry, or a pending grant's maturity; zero
// if nothing will. A sweeper finds idle users by it, to put on the record
// what time decided.
func (a Account) NextDue() time.Time {
	var next time.Time
	if len(a.Buckets) > 0 {
		next = a.Buckets[0].Expire // sorted: soonest first, never last
	}
	for _, h := range a.Holds {
		if next.IsZero() || h.ExpireTime.Before(next) {
			next = h.ExpireTime
		}
	}
	if m := a.NextMaturity(); !m.IsZero() && (next.IsZero() || m.Before(next)) {
		next = m
	}
	return next
}

// expired is the draws of every bucket that has expired at t.
func (a Account) expired(t time.Time) []Draw {
	var ds []Draw
	for _, b := range a.Buckets {
		if !live(b.Expire, t) {
			ds = append(ds, Draw(b))
		}
	}
	return ds
}

// SortBuckets puts buckets in the order an Account holds them (soonest
// expiry first, never-expiring last, then by kind); a store that keeps them
// unordered sorts them on reading.
func SortBuckets(bs []Bucket) []Bucket {
	slices.SortFunc(bs, order)
	return bs
}
