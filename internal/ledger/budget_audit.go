package ledger

import (
	"maps"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// Kinds of Finding about budgets (reconciliation's, across users).
const (
	FindingBudgetUnbalanced = "budget_unbalanced" // a budget's granted + remaining != its total
	FindingBudgetGranted    = "budget_granted"    // a budget's granted != the sum of the grants that name it (or they name no budget)
)

// BudgetShare is what a user's ledger shows of one budget's points: what
// its grants gave, less what debit adjustments gave back to it (Granted,
// as BudgetNet), what of that is still outstanding (Liability), and what
// expired unused (Breakage).
type BudgetShare struct {
	Granted   decimal.Decimal
	Liability decimal.Decimal
	Breakage  decimal.Decimal
}

// Add is the sum of two shares.
func (s BudgetShare) Add(o BudgetShare) BudgetShare {
	return BudgetShare{Granted: s.Granted.Add(o.Granted), Liability: s.Liability.Add(o.Liability), Breakage: s.Breakage.Add(o.Breakage)}
}

// lot is points of one source in a bucket: a budget's id, or "" for
// points of no budget.
type lot struct {
	budget string
	amount decimal.Decimal
}

// BudgetShares attributes a user's points to the budgets they came from,
// by budget id, as of time at. It folds entries (in version order, from
// the first) with Account.Apply and follows each bucket as lots in the
// order they were credited: a debit or a hold takes the oldest lots of
// the buckets it draws first, an EXPIRATION's lots are breakage, and what
// is left in a bucket at the end is liability (breakage if the bucket
// expired by at and is not on the record yet). A grant that names a
// budget credits a lot of that budget; every other credit, points given
// back by a refund or a released hold included, is of no budget, so a
// budget's liability is what is left of its own grants in the buckets.
func BudgetShares(entries []Entry, at time.Time) map[string]BudgetShare {
	out := map[string]BudgetShare{}
	lots := map[string][]lot{} // by bucket (bucketKey)
	var acct Account
	for i, e := range entries {
		if i == 0 {
			acct = NewAccount(e.UserID)
		}
		before := bucketAmounts(acct.Buckets)
		acct = acct.Apply(e)
		after := bucketAmounts(acct.Buckets)
		if e.BudgetID != "" { // a grant, or a give-back (negative)
			s := out[e.BudgetID]
			s.Granted = s.Granted.Add(e.Amount)
			out[e.BudgetID] = s
		}
		for _, k := range slices.Sorted(maps.Keys(union(before, after))) {
			d := after[k].Sub(before[k])
			switch {
			case d.IsPositive():
				src := ""
				if e.Type == EntryGrant {
					src = e.BudgetID
				}
				lots[k] = append(lots[k], lot{budget: src, amount: d})
			case d.IsNegative():
				var taken []lot
				lots[k], taken = take(lots[k], d.Neg())
				if e.Type == EntryExpiration {
					for _, l := range taken {
						addBreakage(out, l)
					}
				}
			}
		}
	}
	for _, b := range acct.Buckets {
		k := bucketKey(b.Expire)
		for _, l := range lots[k] {
			if l.budget == "" {
				continue
			}
			if b.Expire.IsZero() || at.Before(b.Expire) {
				s := out[l.budget]
				s.Liability = s.Liability.Add(l.amount)
				out[l.budget] = s
			} else {
				addBreakage(out, l) // expired, not yet on the record
			}
		}
	}
	return out
}

func addBreakage(out map[string]BudgetShare, l lot) {
	if l.budget == "" {
		return
	}
	s := out[l.budget]
	s.Breakage = s.Breakage.Add(l.amount)
	out[l.budget] = s
}

// take takes amount from the oldest of lots, and returns what is left and
// what it took.
func take(lots []lot, amount decimal.Decimal) (left, taken []lot) {
	for len(lots) > 0 && amount.IsPositive() {
		n := decimal.Min(lots[0].amount, amount)
		taken = append(taken, lot{budget: lots[0].budget, amount: n})
		amount = amount.Sub(n)
		if n.Equal(lots[0].amount) {
			lots = lots[1:]
		} else {
			lots = append([]lot{{budget: lots[0].budget, amount: lots[0].amount.Sub(n)}}, lots[1:]...)
		}
	}
	return lots, taken
}

func bucketKey(expire time.Time) string {
	if expire.IsZero() {
		return "never"
	}
	return expire.UTC().Format(time.RFC3339Nano)
}

func bucketAmounts(bs []Bucket) map[string]decimal.Decimal {
	m := make(map[string]decimal.Decimal, len(bs))
	for _, b := range bs {
		m[bucketKey(b.Expire)] = b.Amount
	}
	return m
}

func union(a, b map[string]decimal.Decimal) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
