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
// the buckets it draws first (an entry that gives back to a budget, the
// lots of that budget first), an EXPIRATION's lots are breakage, and what
// is left in a bucket at the end is liability (breakage if the bucket
// expired by at and is not on the record yet). A grant that names a
// budget credits a lot of that budget, and so does the MATURATION of a
// pending one; every other credit, points given back by a refund or a
// released hold included, is of no budget, so a budget's liability is
// what is left of its own grants in the buckets (pending points are in
// no bucket, so in no liability until they mature). Granted counts what
// each entry takes from the budget it names (Entry.BudgetAmount): a
// pending grant's points from when it is made, as the budget counts
// them.
func BudgetShares(entries []Entry, at time.Time) map[string]BudgetShare {
	out := map[string]BudgetShare{}
	lots := map[string][]lot{}         // by bucket (bucketKey)
	pendingFrom := map[string]string{} // the budget of each pending grant, by request_id
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
			s.Granted = s.Granted.Add(e.BudgetAmount())
			out[e.BudgetID] = s
		}
		if e.Type == EntryGrant && e.BudgetID != "" && e.PendingChange.IsPositive() {
			pendingFrom[e.RequestID] = e.BudgetID
		}
		for _, k := range slices.Sorted(maps.Keys(union(before, after))) {
			d := after[k].Sub(before[k])
			switch {
			case d.IsPositive():
				src := e.BudgetID // a grant's; no other credit names a budget
				if e.Type == EntryMaturation {
					src = pendingFrom[e.GrantRequestID] // a pending grant's points, of its budget
				}
				lots[k] = append(lots[k], lot{budget: src, amount: d})
			case d.IsNegative():
				var taken []lot
				lots[k], taken = take(lots[k], d.Neg(), e.BudgetID)
				if e.Type == EntryExpiration {
					for _, l := range taken {
						addBreakage(out, l)
					}
				}
			}
		}
	}
	for _, b := range acct.Buckets {
		k := bucketKey(b.Kind, b.Expire)
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

// take takes amount from lots, those of budget first (none: ""), then the
// oldest, and returns what is left, in the order it was, and what it
// took.
func take(lots []lot, amount decimal.Decimal, budget string) (left, taken []lot) {
	lots = slices.Clone(lots)
	for _, mine := range []bool{true, false} {
		if mine && budget == "" {
			continue
		}
		for i := range lots {
			if !amount.IsPositive() {
				break
			}
			if mine && lots[i].budget != budget || !lots[i].amount.IsPositive() {
				continue
			}
			n := decimal.Min(lots[i].amount, amount)
			taken = append(taken, lot{budget: lots[i].budget, amount: n})
			lots[i].amount, amount = lots[i].amount.Sub(n), amount.Sub(n)
		}
	}
	for _, l := range lots {
		if l.amount.IsPositive() {
			left = append(left, l)
		}
	}
	return left, taken
}

func bucketKey(kind string, expire time.Time) string {
	if expire.IsZero() {
		return kind + "/never"
	}
	return kind + "/" + expire.UTC().Format(time.RFC3339Nano)
}

func bucketAmounts(bs []Bucket) map[string]decimal.Decimal {
	m := make(map[string]decimal.Decimal, len(bs))
	for _, b := range bs {
		m[bucketKey(b.Kind, b.Expire)] = b.Amount
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
