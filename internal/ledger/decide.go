package ledger

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// Total names a running sum of an account: which one each entry type
// feeds is in its EntryTypeInfo.
type Total int

const (
	TotalGranted  Total = iota + 1 // sum of grants
	TotalSpent                     // sum of purchases, positive
	TotalRefunded                  // sum of refunds
	TotalAdjusted                  // net sum of adjustments
)

// EntryTypeInfo is what an entry type is, for every rule that depends on it.
// Adding a type is a row here; the switches the exhaustive linter checks
// (items, the API's conversions) then say what else must learn it.
type EntryTypeInfo struct {
	// Credit: the entry adds to the balance; else it takes away.
	// Adjustments are either, by Mutation.Debit.
	Credit bool
	// Spends: a debit of this type must be covered by the balance.
	Spends bool
	// NeedsActive: refused on a frozen account.
	NeedsActive bool
	// RefersToPurchase: names a purchase by its request_id.
	RefersToPurchase bool
	// Total is the running sum the entry feeds.
	Total Total
}

// EntryTypes is every entry type and its properties.
var EntryTypes = map[EntryType]EntryTypeInfo{
	EntryGrant:      {Credit: true, Total: TotalGranted},
	EntryPurchase:   {Spends: true, NeedsActive: true, Total: TotalSpent},
	EntryRefund:     {Credit: true, RefersToPurchase: true, Total: TotalRefunded},
	EntryAdjustment: {Credit: true, Spends: true, Total: TotalAdjusted}, // a debit only with Mutation.Debit
}

// Info returns the properties of t, and whether t is an entry type.
func (t EntryType) Info() (EntryTypeInfo, bool) {
	i, ok := EntryTypes[t]
	return i, ok
}

// Facts are what deciding a mutation needs beyond the account, read by the
// store: the purchase a refund names, the sum of the entries an explaining
// adjustment explains.
type Facts struct {
	// Purchase is the purchase a refund names; nil if the user has none with
	// that request_id. A refund over what the store knows is left of it is
	// refused here; that the refunds stay within it is the store's
	// condition, on the purchase as it is when the entry commits.
	Purchase *PurchaseRef
	// EntriesSum is the sum of the amounts of the account's entries (up to
	// its version), for an adjustment that explains the balance.
	EntriesSum decimal.Decimal
}

// PurchaseRef is a purchase as a refund sees it.
type PurchaseRef struct {
	Version int64
	Type    EntryType       // what the request_id names: a refund of anything but a purchase is refused
	Amount  decimal.Decimal // the purchase's positive amount
	// Refunded is at least what its refunds sum to, as far as the store
	// knows (refunds only grow): zero until a refund's condition showed more.
	Refunded decimal.Decimal
}

// Decision is what a mutation does to an account: the entry it appends
// (without an ID: the store gives one) and the account after it.
type Decision struct {
	Entry Entry
	After Account
}

// Decide decides m against acct at time now: the entry it appends and the
// account after, or a refusal (an *Error of kind KindFailedPrecondition or
// KindNotFound: final, see Kind.Final). It reads nothing and writes
// nothing: the store supplies the account and the facts, and commits the
// decision, the entry or the refusal's record, only under conditions that
// the account and facts are still as read.
func Decide(acct Account, m Mutation, now time.Time, f Facts) (Decision, error) {
	info, ok := m.Type.Info()
	if !ok {
		return Decision{}, Errorf(KindInvalid, ReasonInvalidAmount, "unknown entry type %q", m.Type)
	}
	if info.RefersToPurchase && (f.Purchase == nil || f.Purchase.Type != EntryPurchase) {
		return Decision{}, Errorf(KindNotFound, ReasonPurchaseNotFound,
			"user %q has no purchase with request_id %q", m.UserID, m.PurchaseRequestID)
	}
	if info.RefersToPurchase && m.Amount.GreaterThan(f.Purchase.Amount.Sub(f.Purchase.Refunded)) {
		return Decision{}, Errorf(KindFailedPrecondition, ReasonRefundExceedsPurchase,
			"refund of %s exceeds what is left of purchase %q: %s of %s already refunded",
			m.Amount, m.PurchaseRequestID, f.Purchase.Refunded, f.Purchase.Amount)
	}
	if m.ExplainBalance {
		if acct.Version == 0 {
			return Decision{}, Errorf(KindNotFound, ReasonAccountNotFound, "user %q has no account", m.UserID)
		}
		if !acct.Balance.Equal(m.ExpectedBalance) {
			return Decision{}, balanceMoved(m, acct)
		}
		if err := CheckExplains(m, acct, f.EntriesSum); err != nil {
			return Decision{}, err
		}
	}
	if info.NeedsActive && acct.Version > 0 && acct.Status != StatusActive {
		return Decision{}, Errorf(KindFailedPrecondition, ReasonAccountFrozen, "account of user %q is %s", m.UserID, acct.Status)
	}
	if m.Spends() && acct.Balance.LessThan(m.Amount) {
		return Decision{}, Errorf(KindFailedPrecondition, ReasonInsufficientBalance,
			"balance %s of user %q does not cover %s", acct.Balance, m.UserID, m.Amount)
	}
	balance := acct.Balance.Add(m.Delta())
	if m.ExplainBalance {
		balance = acct.Balance // the entry explains the balance; it does not move it
	} else if balance.GreaterThan(MaxBalance) {
		return Decision{}, Errorf(KindFailedPrecondition, ReasonBalanceLimit, "the balance would exceed %s", MaxBalance)
	}
	e := Entry{
		UserID:            m.UserID,
		Version:           acct.Version + 1,
		Type:              m.Type,
		Amount:            m.Delta(),
		BalanceAfter:      balance,
		RequestID:         m.RequestID,
		OrderID:           m.OrderID,
		CreateTime:        now,
		Metadata:          m.Metadata,
		PurchaseRequestID: m.PurchaseRequestID,
		Reason:            m.Reason,
		ExplainsBalance:   m.ExplainBalance,
	}
	if f.Purchase != nil && info.RefersToPurchase {
		e.PurchaseVersion = f.Purchase.Version
	}
	after := acct
	if after.Version == 0 {
		after = NewAccount(m.UserID)
		after.CreateTime = now
	}
	after.Balance, after.Version, after.UpdateTime = balance, e.Version, now
	return Decision{Entry: e, After: after}, nil
}

func balanceMoved(m Mutation, acct Account) error {
	return Errorf(KindFailedPrecondition, ReasonBalanceMoved,
		"balance of user %q is %s, not the expected %s: reconcile again", m.UserID, acct.Balance, m.ExpectedBalance)
}

// Totals are an account's running sums by kind of entry.
type Totals struct {
	Granted  decimal.Decimal
	Spent    decimal.Decimal // positive
	Refunded decimal.Decimal
	Adjusted decimal.Decimal // net
}

// Add is t with e counted in the total its type feeds.
func (t Totals) Add(e Entry) Totals {
	info, _ := e.Type.Info()
	switch info.Total {
	case TotalGranted:
		t.Granted = t.Granted.Add(e.Amount)
	case TotalSpent:
		t.Spent = t.Spent.Sub(e.Amount)
	case TotalRefunded:
		t.Refunded = t.Refunded.Add(e.Amount)
	case TotalAdjusted:
		t.Adjusted = t.Adjusted.Add(e.Amount)
	}
	return t
}

// Plus is the sums of t and o together (of several users, say).
func (t Totals) Plus(o Totals) Totals {
	return Totals{Granted: t.Granted.Add(o.Granted), Spent: t.Spent.Add(o.Spent), Refunded: t.Refunded.Add(o.Refunded), Adjusted: t.Adjusted.Add(o.Adjusted)}
}

// Equal says whether t and o hold the same sums.
func (t Totals) Equal(o Totals) bool {
	return t.Granted.Equal(o.Granted) && t.Spent.Equal(o.Spent) && t.Refunded.Equal(o.Refunded) && t.Adjusted.Equal(o.Adjusted)
}

func (t Totals) String() string {
	return fmt.Sprintf("granted %s spent %s refunded %s adjusted %s", t.Granted, t.Spent, t.Refunded, t.Adjusted)
}
