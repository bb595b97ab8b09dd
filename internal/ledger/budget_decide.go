package ledger

import (
	"time"

	"github.com/shopspring/decimal"
)

// The decisions of BudgetService's calls, pure: a store reads what it
// holds of a budget (the budget, nil if there is none, and the hash it
// recorded under the call's request_id, "" if none), asks here what to do,
// and commits that under conditions that what it read still holds. The
// memory store decides before it writes; the DynamoDB store writes under
// those conditions first and, when one fails, reads the facts that failed
// it and decides here what to answer (each fact only ever becomes true: a
// budget, a request record and a closed status are never undone).
//
// A grant's draw and a give-back are decided by Decide (checkBudget,
// checkGiveBack); Budget.Draw is what they do to the budget's sums.

// Budget is the budget c creates at now: all of it remaining, open.
func (c BudgetCreation) Budget(now time.Time) Budget {
	return Budget{ID: c.BudgetID, Total: c.Amount, Granted: decimal.Zero, Remaining: c.Amount, Status: BudgetOpen,
		Description: c.Description, CreateTime: now.UTC(), Shards: c.Shards}
}

// DecideBudgetCreation decides a creation on the budget of its id (cur,
// nil: none) and the hash recorded under its request_id ("": none): the
// budget to create; the budget as it is, replayed, for the same request
// again; a refusal for another request under its request_id
// (REQUEST_ID_REUSED) or a budget that exists (BUDGET_EXISTS).
func DecideBudgetCreation(c BudgetCreation, cur *Budget, recorded string, now time.Time) (Budget, bool, error) {
	if cur != nil && recorded != "" {
		return ReplayBudget(*cur, c.RequestID, recorded, c.Hash())
	}
	if cur != nil {
		return Budget{}, false, BudgetExists(c.BudgetID)
	}
	return c.Budget(now), false, nil
}

// DecideBudgetTopUp decides a top-up on its budget (cur, nil: none) and
// the hash recorded under its request_id (""): the budget topped up; the
// budget as it is, replayed; or a refusal: BUDGET_NOT_FOUND,
// REQUEST_ID_REUSED, BUDGET_CLOSED (a closed budget takes no top-up; not
// recorded: an admin's call, which may be sent again once it is known
// why).
func DecideBudgetTopUp(u BudgetTopUp, cur *Budget, recorded string) (Budget, bool, error) {
	switch {
	case cur == nil:
		return Budget{}, false, BudgetNotFound(u.BudgetID)
	case recorded != "":
		return ReplayBudget(*cur, u.RequestID, recorded, u.Hash())
	case cur.Status != BudgetOpen:
		return Budget{}, false, BudgetClosedToTopUp(u.BudgetID)
	}
	b := *cur
	b.Total, b.Remaining = b.Total.Add(u.Amount), b.Remaining.Add(u.Amount)
	return b, false, nil
}

// DecideBudgetClose decides the closing of cur: closed, or as it is and
// replayed if it was closed already (closing is idempotent by nature).
func DecideBudgetClose(cur Budget) (Budget, bool) {
	if cur.Status == BudgetClosed {
		return cur, true
	}
	cur.Status = BudgetClosed
	return cur, false
}

// ReplayBudget answers a creation or a top-up of b whose request_id has a
// record (hash recorded): b as it is now, replayed, if it was the same
// request (hash); REQUEST_ID_REUSED if it was another.
func ReplayBudget(b Budget, requestID, recorded, hash string) (Budget, bool, error) {
	if recorded != hash {
		return Budget{}, false, Errorf(KindAlreadyExists, ReasonRequestIDReused,
			"request_id %q of budget %q was used for another request", requestID, b.ID)
	}
	return b, true, nil
}

// Draw is b after an entry that names it: a grant takes its amount (a
// pending grant's too), a give-back (a debit adjustment, a reversal)
// returns what it gives (Entry.BudgetAmount, negative). Granted +
// Remaining stays Total.
func (b Budget) Draw(e Entry) Budget {
	if e.BudgetID != b.ID {
		return b
	}
	a := e.BudgetAmount()
	b.Granted, b.Remaining = b.Granted.Add(a), b.Remaining.Sub(a)
	return b
}

// BudgetExists is the refusal of a creation of budget id, which exists
// already (under another request_id).
func BudgetExists(id string) *Error {
	return Errorf(KindAlreadyExists, ReasonBudgetExists, "budget %q exists already", id)
}

// BudgetClosedToTopUp is the refusal of a top-up of budget id, which is
// closed.
func BudgetClosedToTopUp(id string) *Error {
	return BudgetIsClosed(id, "budget %q is closed: it takes no top-up", id)
}

// The audit rule of a budget's books, for reconciliation and the tests
// of every store: granted + remaining = total, and granted is the sum of
// what the users' entries that name the budget took from it
// (BudgetShares, BudgetNet).

// Unbalanced is the finding of a budget whose granted and remaining do
// not add up to its total; nil when they do.
func (b Budget) Unbalanced() *Finding {
	if b.Granted.Add(b.Remaining).Equal(b.Total) {
		return nil
	}
	return &Finding{BudgetID: b.ID, Kind: FindingBudgetUnbalanced,
		Expected: "granted + remaining = total " + b.Total.String(), Found: b.Granted.String() + " + " + b.Remaining.String()}
}

// GrantsDisagree is the finding of a budget whose granted is not what the
// entries that name it took (grants, the sum of their BudgetAmount): a
// reader that sums them while grants go on finds a sum between the
// budget's granted read before (low) and b's, read after; nil when the sum
// is within. On a quiet ledger low is b.Granted.
func (b Budget) GrantsDisagree(grants, low decimal.Decimal) *Finding {
	if !grants.LessThan(low) && !grants.GreaterThan(b.Granted) {
		return nil
	}
	return &Finding{BudgetID: b.ID, Kind: FindingBudgetGranted,
		Expected: "granted " + b.Granted.String(), Found: "grants summing to " + grants.String()}
}

// NoSuchBudget is the finding of entries that name budget id, which does
// not exist; grants is what they took from it.
func NoSuchBudget(id string, grants decimal.Decimal) Finding {
	return Finding{BudgetID: id, Kind: FindingBudgetGranted,
		Expected: "a budget " + id, Found: "grants of " + grants.String() + " name it, and there is no such budget"}
}
