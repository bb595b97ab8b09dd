package check

import (
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/loadtest/report"
)

// checkPending on entries as the ledger writes them (made by the domain's
// own fold and decisions), and with each violation of the returns
// scenario's invariants written into them by hand.
func TestCheckPending(t *testing.T) {
	t.Parallel()
	d := decimal.RequireFromString
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	eff := t0.Add(3 * time.Second)
	honest := func() []ledger.Entry {
		return []ledger.Entry{
			{Version: 1, Type: ledger.EntryGrant, Amount: d("5"), BalanceAfter: d("5"), RequestID: "seed", CreateTime: t0},
			{Version: 2, Type: ledger.EntryGrant, PendingChange: d("6"), PendingAfter: d("6"), BalanceAfter: d("5"), RequestID: "g", EffectiveTime: eff, CreateTime: t0},
			{Version: 3, Type: ledger.EntryReversal, PendingChange: d("-2"), PendingAfter: d("4"), BalanceAfter: d("5"), RequestID: "rv", GrantRequestID: "g", GrantVersion: 2, CreateTime: t0},
			{Version: 4, Type: ledger.EntryMaturation, Amount: d("4"), PendingChange: d("-4"), BalanceAfter: d("9"), GrantRequestID: "g", GrantVersion: 2, EffectiveTime: eff, CreateTime: eff},
			{Version: 5, Type: ledger.EntryReversal, Amount: d("-4"), BalanceAfter: d("5"), RequestID: "rv2", GrantRequestID: "g", GrantVersion: 2, CreateTime: eff},
		}
	}
	var counts report.Returns
	if folded, _, err := ledger.Fold("u", honest()); err != nil {
		t.Fatal(err)
	} else if v := checkPending("u", folded, folded, honest(), &counts); len(v) != 0 {
		t.Fatalf("violations on honest entries: %v", v)
	}
	if want := (report.Returns{PendingGrants: 1, Maturations: 1, OfPending: 1, OfMatured: 1}); counts != want {
		t.Errorf("counts %+v, want %+v", counts, want)
	}
	for _, tc := range []struct {
		name string
		edit func([]ledger.Entry) []ledger.Entry
		acct func(*ledger.Account)
		want string
	}{
		{name: "an account whose pending is off", acct: func(a *ledger.Account) { a.Pending = d("1") },
			want: "u: pending 1, its entries fold to 0"},
		{name: "a purchase of pending points", edit: func(es []ledger.Entry) []ledger.Entry {
			return slices.Insert(es, 3, ledger.Entry{Version: 4, Type: ledger.EntryPurchase, Amount: d("-7"), BalanceAfter: d("-2"), RequestID: "p", CreateTime: t0})
		}, want: "u: balance -2 after entry 4 (PURCHASE): points spent that were not spendable"},
		{name: "a maturation before its time", edit: func(es []ledger.Entry) []ledger.Entry {
			es[3].CreateTime = eff.Add(-time.Millisecond)
			return es
		}, want: "u: grant g matured at 2026-11-22T10:00:02.999Z, before its effective time 2026-11-22T10:00:03Z"},
		{name: "reversals over the grant", edit: func(es []ledger.Entry) []ledger.Entry {
			return append(es, ledger.Entry{Version: 6, Type: ledger.EntryReversal, Amount: d("-1"), BalanceAfter: d("4"), RequestID: "rv3", GrantRequestID: "g", GrantVersion: 2, CreateTime: eff})
		}, want: "u: reversals of grant g took back 7, it gave 6"},
	} {
		es := honest()
		if tc.edit != nil {
			es = tc.edit(es)
			for i := range es {
				es[i].Version = int64(i + 1)
			}
		}
		folded, _, _ := ledger.Fold("u", es)
		a := folded
		if tc.acct != nil {
			tc.acct(&a)
		}
		if v := checkPending("u", a, folded, es, &report.Returns{}); !slices.Contains(v, tc.want) {
			t.Errorf("%s: violations %q, want %q", tc.name, v, tc.want)
		}
	}
}
