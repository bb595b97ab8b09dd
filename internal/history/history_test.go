package history

import (
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// entries is a grant, a purchase and a refund of part of it, as the ledger
// keeps them (the purchase carrying its refund).
func entries() []ledger.Entry {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	d := decimal.RequireFromString
	return []ledger.Entry{
		{UserID: "u", Version: 1, Type: ledger.EntryGrant, Amount: d("10"), BalanceAfter: d("10"), RequestID: "g", CreateTime: at},
		{UserID: "u", Version: 2, Type: ledger.EntryPurchase, Amount: d("-4"), BalanceAfter: d("6"), RequestID: "p", CreateTime: at, RefundedAmount: d("1")},
		{UserID: "u", Version: 3, Type: ledger.EntryRefund, Amount: d("1"), BalanceAfter: d("7"), RequestID: "r", CreateTime: at,
			PurchaseRequestID: "p", PurchaseVersion: 2},
	}
}

// project is the history a projector writes of es up to version upTo: the
// items, a purchase's refunded amount the refunds applied so far, and the
// state.
func project(es []ledger.Entry, upTo int64) (State, []ledger.Entry) {
	st := State{UserID: "u"}
	var items []ledger.Entry
	for _, e := range es {
		if e.Version > upTo {
			break
		}
		if e.Refundable() {
			e.RefundedAmount = decimal.Zero
		}
		if e.Type == ledger.EntryRefund {
			p := &items[e.PurchaseVersion-1]
			p.RefundedAmount = p.RefundedAmount.Add(e.Amount)
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
		}, want: []string{ledger.FindingProjectionMismatch, ledger.FindingProjectionExtra, ledger.FindingProjectionState}},
		{name: "an item off its entry", edit: func(_ *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			(*items)[0].Amount = decimal.NewFromInt(11)
		}, want: []string{ledger.FindingProjectionMismatch}},
		{name: "a purchase's refunded amount off", edit: func(_ *State, items *[]ledger.Entry, _ *[]ledger.Entry) {
			(*items)[1].RefundedAmount = decimal.NewFromInt(2)
		}, want: []string{ledger.FindingProjectionMismatch}},
		// The projection keeps a grant as it was written: its reversed
		// amount, which its reversals move, is not history's to follow.
		{name: "a grant reversed since it was projected", edit: func(_ *State, _ *[]ledger.Entry, es *[]ledger.Entry) {
			(*es)[0].ReversedAmount = decimal.NewFromInt(3)
		}},
		{name: "the state's totals off", edit: func(st *State, _ *[]ledger.Entry, _ *[]ledger.Entry) {
			st.Spent = decimal.NewFromInt(5)
		}, want: []string{ledger.FindingProjectionState}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			es := entries()
			st, items := project(es, 3)
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
