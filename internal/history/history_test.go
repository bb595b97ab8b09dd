package history

import (
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// entries is a grant, a purchase and a refund of part of it, then a
// pending grant, a reversal of part of it and the maturation of the rest,
// as the ledger keeps them (the purchase carrying its refund, the pending
// grant its reversal).
func entries() []ledger.Entry {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	d := decimal.RequireFromString
	return []ledger.Entry{
		{UserID: "u", Version: 1, Type: ledger.EntryGrant, Amount: d("10"), BalanceAfter: d("10"), RequestID: "g", CreateTime: at},
		{UserID: "u", Version: 2, Type: ledger.EntryPurchase, Amount: d("-4"), BalanceAfter: d("6"), RequestID: "p", CreateTime: at, RefundedAmount: d("1")},
		{UserID: "u", Version: 3, Type: ledger.EntryRefund, Amount: d("1"), BalanceAfter: d("7"), RequestID: "r", CreateTime: at,
			PurchaseRequestID: "p", PurchaseVersion: 2},
		{UserID: "u", Version: 4, Type: ledger.EntryGrant, Amount: d("0"), BalanceAfter: d("7"), RequestID: "pg", CreateTime: at,
			PendingChange: d("5"), PendingAfter: d("5"), EffectiveTime: at.Add(time.Hour), ReversedAmount: d("2")},
		{UserID: "u", Version: 5, Type: ledger.EntryReversal, Amount: d("0"), BalanceAfter: d("7"), RequestID: "rv", CreateTime: at,
			PendingChange: d("-2"), PendingAfter: d("3"), GrantRequestID: "pg", GrantVersion: 4},
		{UserID: "u", Version: 6, Type: ledger.EntryMaturation, Amount: d("3"), BalanceAfter: d("10"), CreateTime: at.Add(time.Hour),
			PendingChange: d("-3"), EffectiveTime: at.Add(time.Hour), GrantRequestID: "pg", GrantVersion: 4},
	}
}

// project is the history a projector writes of es up to version upTo: the
// items, a purchase's refunded amount the refunds applied so far (a
// grant's reversed amount its reversals), and the state.
func project(es []ledger.Entry, upTo int64) (State, []ledger.Entry) {
	st := State{UserID: "u"}
	var items []ledger.Entry
	for _, e := range es {
		if e.Version > upTo {
			break
		}
		switch {
		case e.Refundable():
			e.RefundedAmount = decimal.Zero
		case e.Type == ledger.EntryGrant:
			e.ReversedAmount = decimal.Zero
		case e.Type == ledger.EntryRefund:
			p := &items[e.PurchaseVersion-1]
			p.RefundedAmount = p.RefundedAmount.Add(e.Amount)
		case e.Type == ledger.EntryReversal:
			g := &items[e.GrantVersion-1]
			g.ReversedAmount = g.ReversedAmount.Sub(e.Amount).Sub(e.PendingChange)
		}
		items = append(items, e)
		st = st.Add(e)
	}
	return st, items
}

func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(st *State, items *[]ledger.Entry, entries *[]ledger.Entry)
		want []string // finding kinds, in order
	}{
		{name: "a history in step", edit: func(*State, *[]ledger.Entry, *[]ledger.Entry) {}},
		{name: "a history behind", edit: func(st *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			*st, *items = project(entries(), 1)
		}, want: []string{ledger.FindingProjectionMissing, ledger.FindingProjectionState}},
		// Reconciliation compares such a history with the entries since
		// instead: its purchase counts a refund the entries do not have.
		{name: "a history ahead of the entries", edit: func(_ *State, _ *[]ledger.Entry, es *[]ledger.Entry) {
			*es = (*es)[:2]
			(*es)[1].RefundedAmount = decimal.Zero
		}, want: []string{ledger.FindingProjectionMismatch, ledger.FindingProjectionExtra, ledger.FindingProjectionExtra,
			ledger.FindingProjectionExtra, ledger.FindingProjectionExtra, ledger.FindingProjectionState}},
		{name: "an item off its entry", edit: func(_ *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			(*items)[0].Amount = decimal.NewFromInt(11)
		}, want: []string{ledger.FindingProjectionMismatch}},
		{name: "a purchase's refunded amount off", edit: func(_ *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			(*items)[1].RefundedAmount = decimal.NewFromInt(2)
		}, want: []string{ledger.FindingProjectionMismatch}},
		{name: "the state's totals off", edit: func(st *State, _ *[]ledger.Entry, _ *[]ledger.Entry) {
			st.Spent = decimal.NewFromInt(5)
		}, want: []string{ledger.FindingProjectionState}},
		// A history that applied the pending grant but not yet its
		// reversal shows nothing reversed, where the ledger has 2 by now.
		{name: "a history before a reversal", edit: func(st *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			*st, *items = project(entries(), 4)
		}, want: []string{ledger.FindingProjectionMissing, ledger.FindingProjectionState}},
		{name: "a grant's reversed amount off", edit: func(_ *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			(*items)[3].ReversedAmount = decimal.NewFromInt(3)
		}, want: []string{ledger.FindingProjectionMismatch}},
		{name: "a maturation's pending change off", edit: func(_ *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			(*items)[5].PendingChange = decimal.NewFromInt(-2)
		}, want: []string{ledger.FindingProjectionMismatch}},
		{name: "the state's pending off", edit: func(st *State, _ *[]ledger.Entry, _ *[]ledger.Entry) {
			st.Pending = decimal.NewFromInt(3)
		}, want: []string{ledger.FindingProjectionState}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			es := entries()
			st, items := project(es, 6)
			tt.edit(&st, &items, &es)
			var kinds []string
			for _, f := range Compare("u", es, st, items) {
				kinds = append(kinds, f.Kind)
			}
			if !slices.Equal(kinds, tt.want) {
				t.Errorf("findings %v, want kinds %v", kinds, tt.want)
			}
		})
	}
}
