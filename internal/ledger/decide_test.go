package ledger

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

var d = decimal.RequireFromString

func TestFold(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	entries := []Entry{
		{UserID: "alice", Version: 1, Type: EntryGrant, Amount: d("100"), CreateTime: at},
		{UserID: "alice", Version: 2, Type: EntryPurchase, Amount: d("-30.5"), CreateTime: at.Add(time.Second)},
		{UserID: "alice", Version: 3, Type: EntryRefund, Amount: d("10"), CreateTime: at.Add(2 * time.Second)},
		{UserID: "alice", Version: 4, Type: EntryAdjustment, Amount: d("-2"), CreateTime: at.Add(3 * time.Second)},
	}
	a, totals, err := Fold("alice", entries)
	if err != nil {
		t.Fatal(err)
	}
	if a.Version != 4 || !a.Balance.Equal(d("77.5")) || !a.CreateTime.Equal(at) || !a.UpdateTime.Equal(at.Add(3*time.Second)) {
		t.Errorf("Fold = %+v, want version 4, balance 77.5, created at the first entry, updated at the last", a)
	}
	want := Totals{Granted: d("100"), Spent: d("30.5"), Refunded: d("10"), Adjusted: d("-2")}
	if !totals.Equal(want) {
		t.Errorf("totals = %s, want %s", totals, want)
	}
	if _, _, err := Fold("alice", []Entry{entries[0], entries[2]}); err == nil {
		t.Error("Fold accepted a version gap")
	}
}

// Every entry type has its properties, and the ones a mutation can carry
// decide the sign of its amount.
func TestEntryTypes(t *testing.T) {
	t.Parallel()
	for _, typ := range []EntryType{EntryGrant, EntryPurchase, EntryRefund, EntryAdjustment} {
		if _, ok := typ.Info(); !ok {
			t.Errorf("%s has no properties", typ)
		}
	}
	if _, ok := EntryType("BONUS").Info(); ok {
		t.Error("an unknown type has properties")
	}
}

func mustMutation(tb testing.TB, typ EntryType, r Request) Mutation {
	tb.Helper()
	m, err := NewMutation(typ, r, DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	active := Account{UserID: "u", Balance: d("50"), Version: 3, Status: StatusActive}
	frozen := active
	frozen.Status = StatusFrozen
	purchase := &PurchaseRef{Version: 2, Type: EntryPurchase, Amount: d("20")}
	refunded := &PurchaseRef{Version: 2, Type: EntryPurchase, Amount: d("20"), Refunded: d("15")}
	tests := []struct {
		name    string
		acct    Account
		typ     EntryType
		req     Request
		facts   Facts
		reason  string // "" = decided
		amount  string // the entry's signed amount
		balance string // after
	}{
		{"a grant to a new user", Account{}, EntryGrant, Request{Amount: "10"}, Facts{}, "", "10", "10"},
		{"a purchase covered", active, EntryPurchase, Request{Amount: "50"}, Facts{}, "", "-50", "0"},
		{"a purchase not covered", active, EntryPurchase, Request{Amount: "50.01"}, Facts{}, ReasonInsufficientBalance, "", ""},
		{"a purchase of a new user", Account{}, EntryPurchase, Request{Amount: "1"}, Facts{}, ReasonInsufficientBalance, "", ""},
		{"a purchase on a frozen account", frozen, EntryPurchase, Request{Amount: "1"}, Facts{}, ReasonAccountFrozen, "", ""},
		{"a grant on a frozen account", frozen, EntryGrant, Request{Amount: "1"}, Facts{}, "", "1", "51"},
		{"a refund", frozen, EntryRefund, Request{Amount: "5", PurchaseRequestID: "p"}, Facts{Purchase: purchase}, "", "5", "55"},
		{"a refund of the whole purchase", active, EntryRefund, Request{Amount: "20", PurchaseRequestID: "p"}, Facts{Purchase: purchase}, "", "20", "70"},
		{"a refund over the purchase", active, EntryRefund, Request{Amount: "20.01", PurchaseRequestID: "p"}, Facts{Purchase: purchase}, ReasonRefundExceedsPurchase, "", ""},
		{"a refund of what is left", active, EntryRefund, Request{Amount: "5", PurchaseRequestID: "p"}, Facts{Purchase: refunded}, "", "5", "55"},
		{"a refund over what is left", active, EntryRefund, Request{Amount: "5.01", PurchaseRequestID: "p"}, Facts{Purchase: refunded}, ReasonRefundExceedsPurchase, "", ""},
		{"a refund of nothing", active, EntryRefund, Request{Amount: "5", PurchaseRequestID: "p"}, Facts{}, ReasonPurchaseNotFound, "", ""},
		{"a refund of a grant", active, EntryRefund, Request{Amount: "5", PurchaseRequestID: "g"}, Facts{Purchase: &PurchaseRef{Version: 1, Type: EntryGrant}}, ReasonPurchaseNotFound, "", ""},
		{"a debit adjustment covered, frozen", frozen, EntryAdjustment, Request{Amount: "50", Debit: true, Reason: "r"}, Facts{}, "", "-50", "0"},
		{"a debit adjustment not covered", active, EntryAdjustment, Request{Amount: "51", Debit: true, Reason: "r"}, Facts{}, ReasonInsufficientBalance, "", ""},
		{"past the balance limit", Account{UserID: "u", Balance: MaxBalance, Version: 1, Status: StatusActive}, EntryGrant, Request{Amount: "1"}, Facts{}, ReasonBalanceLimit, "", ""},
		{"explaining the difference", active, EntryAdjustment, Request{Amount: "7", Reason: "r", ExplainBalance: true, ExpectedBalance: "50"}, Facts{EntriesSum: d("43")}, "", "7", "50"},
		{"explaining a moved balance", active, EntryAdjustment, Request{Amount: "7", Reason: "r", ExplainBalance: true, ExpectedBalance: "51"}, Facts{EntriesSum: d("43")}, ReasonBalanceMoved, "", ""},
		{"explaining a new user", Account{}, EntryAdjustment, Request{Amount: "7", Reason: "r", ExplainBalance: true, ExpectedBalance: "0"}, Facts{}, ReasonAccountNotFound, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.req.UserID, tc.req.RequestID = "u", "req"
			m := mustMutation(t, tc.typ, tc.req)
			dec, err := Decide(tc.acct, m, now, tc.facts)
			if tc.reason != "" {
				if ReasonOf(err) != tc.reason {
					t.Fatalf("Decide = %+v, %v; want refusal %s", dec, err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			e := dec.Entry()
			if e.Version != tc.acct.Version+1 || !e.Amount.Equal(d(tc.amount)) || !e.BalanceAfter.Equal(d(tc.balance)) || !e.CreateTime.Equal(now) {
				t.Errorf("entry = %+v, want version %d, amount %s, balance after %s", e, tc.acct.Version+1, tc.amount, tc.balance)
			}
			if dec.After.Version != e.Version || !dec.After.Balance.Equal(e.BalanceAfter) || dec.After.UserID != "u" {
				t.Errorf("after = %+v, want the entry's version and balance", dec.After)
			}
			// The decision and the fold agree: what Decide appends, Apply folds.
			if !m.ExplainBalance {
				if folded := tc.acct.Apply(e); !folded.Balance.Equal(dec.After.Balance) || folded.Version != dec.After.Version {
					t.Errorf("Apply of the decided entry = %+v, Decide's account %+v", folded, dec.After)
				}
			}
		})
	}
}
