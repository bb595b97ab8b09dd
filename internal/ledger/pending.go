package ledger

import (
	"cmp"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// DefaultMaxPending bounds a user's pending grants, which live in the
// account as holds do. It is larger than the open holds' bound since a
// return window holds many orders' points at once; a sweeper that finds
// more due than one transaction holds writes their maturations in parts
// (DecideExpiryUpTo).
const DefaultMaxPending = 50

// PendingLot is what a grant with an effective time (or a credit
// adjustment with one) keeps aside until then: not in the balance, not
// spendable, not holdable. At EffectiveTime a MATURATION entry puts what is
// left of it in the bucket of its ExpireTime; a reversal takes from it
// first. Each lot is its grant's: lots do not merge, since a reversal names
// one grant.
type PendingLot struct {
	GrantRequestID string // the request_id of the entry that made it
	Amount         decimal.Decimal
	EffectiveTime  time.Time // at it, the points are spendable
	ExpireTime     time.Time // zero: they never expire once spendable
	Version        int64     // of the entry that made it
	Kind           string    // of its points ("": standard)
}

// GrantRef is a grant as a reversal sees it.
type GrantRef struct {
	Version int64
	Type    EntryType       // what the request_id names: a reversal of anything but a grant is refused
	Amount  decimal.Decimal // all the grant gave, pending or not
	// Reversed is what earlier reversals took back, as the store read the
	// grant.
	Reversed decimal.Decimal
	// BudgetID is the budget the grant drew on ("" for none): a reversal
	// gives back to it, and the store reads it for Facts.Budget.
	BudgetID string
	// Kind is the grant's kind: a reversal takes back points of it only.
	Kind string
}

// matures says whether points of effective time e are spendable at t: at
// or after e. A pending grant matures exactly at its effective time, as a
// bucket expires exactly at its expire time.
func matures(e, t time.Time) bool { return !t.Before(e) }

// lotOf is the pending lot a credit entry with a pending_change makes.
func lotOf(e Entry) PendingLot {
	return PendingLot{GrantRequestID: e.RequestID, Amount: e.PendingChange, EffectiveTime: e.EffectiveTime, ExpireTime: e.ExpireTime, Version: e.Version, Kind: e.Kind}
}

// Lot returns the account's pending lot of grant id.
func (a Account) Lot(id string) (PendingLot, bool) {
	i := slices.IndexFunc(a.PendingLots, func(l PendingLot) bool { return l.GrantRequestID == id })
	if i < 0 {
		return PendingLot{}, false
	}
	return a.PendingLots[i], true
}

// lotsLess is the account's pending lots with amount taken from the one
// of grant id; an emptied lot goes.
func (a Account) lotsLess(id string, amount decimal.Decimal) []PendingLot {
	lots := slices.Clone(a.PendingLots)
	i := slices.IndexFunc(lots, func(l PendingLot) bool { return l.GrantRequestID == id })
	if i < 0 {
		return lots
	}
	lots[i].Amount = lots[i].Amount.Sub(amount)
	if !lots[i].Amount.IsPositive() {
		lots = slices.Delete(lots, i, i+1)
	}
	return lots
}

// dueLots is the account's pending lots that have matured at t, soonest
// effective time first, then in the order they were granted: the order
// their MATURATION entries are written in.
func (a Account) dueLots(t time.Time) []PendingLot {
	var due []PendingLot
	for _, l := range a.PendingLots {
		if matures(l.EffectiveTime, t) {
			due = append(due, l)
		}
	}
	slices.SortStableFunc(due, func(x, y PendingLot) int {
		return cmp.Or(x.EffectiveTime.Compare(y.EffectiveTime), cmp.Compare(x.Version, y.Version))
	})
	return due
}

// Maturing is what the account still has pending at t, by effective time,
// soonest first, at most n of them: grants maturing at one instant are
// one line.
func (a Account) Maturing(t time.Time, n int) []Maturity {
	var out []Maturity
	lots := slices.SortedStableFunc(slices.Values(a.At(t).PendingLots), func(x, y PendingLot) int { return x.EffectiveTime.Compare(y.EffectiveTime) })
	for _, l := range lots {
		if k := len(out); k > 0 && out[k-1].EffectiveTime.Equal(l.EffectiveTime) {
			out[k-1].Amount = out[k-1].Amount.Add(l.Amount)
			continue
		}
		if len(out) == n {
			break
		}
		out = append(out, Maturity{EffectiveTime: l.EffectiveTime, Amount: l.Amount})
	}
	return out
}

// Maturity is what of an account's pending points becomes spendable at one
// time.
type Maturity struct {
	EffectiveTime time.Time
	Amount        decimal.Decimal
}

// NextMaturity is the soonest effective time of the account's pending
// lots; zero if none is pending.
func (a Account) NextMaturity() time.Time {
	var next time.Time
	for _, l := range a.PendingLots {
		if next.IsZero() || l.EffectiveTime.Before(next) {
			next = l.EffectiveTime
		}
	}
	return next
}

// PendingTotal is the sum of pending lots: an account's Pending, which the
// audit checks against its lots.
func PendingTotal(lots []PendingLot) decimal.Decimal {
	t := decimal.Zero
	for _, l := range lots {
		t = t.Add(l.Amount)
	}
	return t
}

// expiryTimes is how many distinct (kind, expiry) buckets the account's
// buckets and pending lots hold, with (kind, expire) among them: what a
// pending grant would bring the account's buckets to once everything
// pending matured.
func (a Account) expiryTimes(kind string, expire time.Time) int {
	keys := []Bucket{{Expire: expire, Kind: kind}}
	add := func(k string, t time.Time) {
		if !slices.ContainsFunc(keys, func(b Bucket) bool { return b.Kind == k && b.Expire.Equal(t) }) {
			keys = append(keys, Bucket{Expire: t, Kind: k})
		}
	}
	for _, b := range a.Buckets {
		add(b.Kind, b.Expire)
	}
	for _, l := range a.PendingLots {
		add(l.Kind, l.ExpireTime)
	}
	return len(keys)
}
