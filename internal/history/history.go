// Package history is what a user's history is, whoever keeps it: its state
// (State, the ledger's own fold of the entries applied), how it is compared
// with the ledger's entries (Compare), and what a projector that keeps it
// reports (ProjectorStatus). It imports no SDK: package projection keeps
// history in DynamoDB, package memory in memory, and package reconcile and
// the API use these types without either.
package history

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/consumerstatus"
	"github.com/pointledger/pointledger/internal/ledger"
)

// State is a user's history state: how far history has applied the
// ledger's entries, and their totals.
type State struct {
	UserID  string
	Version int64           // the last applied entry's version
	Balance decimal.Decimal // the fold of the applied entries' amounts
	Pending decimal.Decimal // the fold of their pending changes: granted, not yet spendable
	ledger.Totals
	LastEntry time.Time // create_time of the last applied entry
}

// Add is the state after applying e: the ledger's own fold of an entry
// (ledger.Account.Apply, ledger.Totals.Add), so that history and ledger
// cannot count differently.
func (st State) Add(e ledger.Entry) State {
	acct := ledger.Account{UserID: st.UserID, Balance: st.Balance, Pending: st.Pending, Version: st.Version}.Apply(e)
	st.Version, st.Balance, st.Pending, st.LastEntry = acct.Version, acct.Balance, acct.Pending, e.CreateTime
	st.Totals = st.Totals.Add(e)
	return st
}

// SameTotals says whether a and b have the same balance, pending and
// totals.
func (st State) SameTotals(b State) bool {
	return st.Balance.Equal(b.Balance) && st.Pending.Equal(b.Pending) && st.Equal(b.Totals)
}

func (st State) String() string {
	return fmt.Sprintf("version %d balance %s pending %s %s", st.Version, st.Balance, st.Pending, st.Totals)
}

// Some entries keep a running amount that later entries add to after they
// are written: a purchase's (or capture's) refunded amount, which its
// refunds add to, and a grant's reversed amount, which its reversals add
// to. History keeps each as the sum of the later entries it has applied,
// so it starts at zero and moves only when one of them is applied.

// AddsTo says which earlier entry's running amount e adds to (its
// version), and how much; ok is false for an entry that adds to none.
func AddsTo(e ledger.Entry) (version int64, amount decimal.Decimal, ok bool) {
	switch e.Type {
	case ledger.EntryRefund:
		return e.PurchaseVersion, e.Amount, true
	case ledger.EntryReversal: // what it took back, pending and spendable points together
		return e.GrantVersion, e.Amount.Neg().Sub(e.PendingChange), true
	default:
		return 0, decimal.Zero, false
	}
}

// Running is e's running amount, and whether it keeps one.
func Running(e ledger.Entry) (decimal.Decimal, bool) {
	switch {
	case e.Refundable():
		return e.RefundedAmount, true
	case e.Type == ledger.EntryGrant:
		return e.ReversedAmount, true
	}
	return decimal.Zero, false
}

// WithRunning is e with its running amount set to amount (e itself if it
// keeps none).
func WithRunning(e ledger.Entry, amount decimal.Decimal) ledger.Entry {
	switch {
	case e.Refundable():
		e.RefundedAmount = amount
	case e.Type == ledger.EntryGrant:
		e.ReversedAmount = amount
	}
	return e
}

// ProjectorStatus is what a projector reports about itself: its stream
// consumer's status (one type, consumerstatus.Status; this name for what
// reads a projector's).
type ProjectorStatus = consumerstatus.Status

// Compare compares a user's history (state st, items) with the ledger's
// entries, in version order, and returns what differs. History has what a
// projector writes: entries up to st.Version, a running amount (a
// purchase's refunded amount, a grant's reversed amount) being the sum of
// the entries up to st.Version that add to it. A history behind the
// entries is a finding (projection_missing, projection_state); one
// ahead of them too, unless entries reach as far.
func Compare(user string, entries []ledger.Entry, st State, items []ledger.Entry) []ledger.Finding {
	var out []ledger.Finding
	add := func(kind string, expected, found any, versions ...int64) {
		out = append(out, ledger.Finding{UserID: user, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
	}
	latest := int64(0)
	if len(entries) > 0 {
		latest = entries[len(entries)-1].Version
	}
	running := map[int64]decimal.Decimal{} // by the version they add to, as of st.Version
	fold := State{UserID: user}
	for _, e := range entries {
		if e.Version > st.Version {
			break
		}
		if v, amount, ok := AddsTo(e); ok {
			running[v] = running[v].Add(amount)
		}
		fold = fold.Add(e)
	}
	byVersion := map[int64]ledger.Entry{}
	for _, h := range items {
		byVersion[h.Version] = h
	}
	var missing []int64
	for _, e := range entries {
		h, ok := byVersion[e.Version]
		if !ok {
			missing = append(missing, e.Version)
			continue
		}
		delete(byVersion, e.Version)
		if got, ok := Running(h); ok {
			want := running[e.Version]
			e = WithRunning(e, want) // the ledger's may count entries past st.Version
			if want.Equal(got) {
				h = WithRunning(h, want) // equal, whatever the decimal's form
			}
		}
		if !reflect.DeepEqual(h, e) {
			add(ledger.FindingProjectionMismatch, describe(e), describe(h), e.Version)
		}
	}
	if len(missing) > 0 {
		add(ledger.FindingProjectionMissing, fmt.Sprintf("%d entries", len(missing)), "none", missing...)
	}
	// What is left has no entry. Below the ledger's last version that is the
	// ledger's own finding (a missing entry), reported by its audit.
	for _, v := range slices.Sorted(maps.Keys(byVersion)) {
		if v > latest {
			add(ledger.FindingProjectionExtra, "no entry", describe(byVersion[v]), v)
		}
	}
	switch {
	case st.Version == fold.Version && !st.SameTotals(fold):
		add(ledger.FindingProjectionState, fold, st, st.Version)
	case st.Version > latest:
		add(ledger.FindingProjectionState, fmt.Sprintf("version <= %d", latest), fmt.Sprintf("version %d", st.Version), st.Version)
	case st.Version < latest:
		add(ledger.FindingProjectionState, fmt.Sprintf("version %d", latest), fmt.Sprintf("version %d", st.Version), st.Version)
	}
	return out
}

// describe is an entry as a projection finding shows it.
func describe(e ledger.Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s balance_after %s request %s", e.Type, e.Amount, e.BalanceAfter, e.RequestID)
	if e.Refundable() {
		fmt.Fprintf(&b, " refunded %s", e.RefundedAmount)
	}
	if e.MovesPending() {
		fmt.Fprintf(&b, " pending_change %s pending_after %s", e.PendingChange, e.PendingAfter)
	}
	if e.Type == ledger.EntryGrant {
		fmt.Fprintf(&b, " reversed %s", e.ReversedAmount)
	}
	return b.String()
}
