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

	"github.com/pointledger/pointledger/internal/ledger"
)

// State is a user's history state: how far history has applied the
// ledger's entries, and their totals.
type State struct {
	UserID  string
	Version int64           // the last applied entry's version
	Balance decimal.Decimal // the fold of the applied entries' amounts
	ledger.Totals
	LastEntry time.Time // create_time of the last applied entry
}

// Add is the state after applying e: the ledger's own fold of an entry
// (ledger.Account.Apply, ledger.Totals.Add), so that history and ledger
// cannot count differently.
func (st State) Add(e ledger.Entry) State {
	acct := ledger.Account{UserID: st.UserID, Balance: st.Balance, Version: st.Version}.Apply(e)
	st.Version, st.Balance, st.LastEntry = acct.Version, acct.Balance, e.CreateTime
	st.Totals = st.Totals.Add(e)
	return st
}

// SameTotals says whether a and b have the same balance and totals.
func (st State) SameTotals(b State) bool {
	return st.Balance.Equal(b.Balance) && st.Equal(b.Totals)
}

func (st State) String() string {
	return fmt.Sprintf("version %d balance %s %s", st.Version, st.Balance, st.Totals)
}

// ProjectorStatus is what a projector reports about itself.
type ProjectorStatus struct {
	Owner         string        `json:"owner"`
	Shards        []string      `json:"shards"`    // held now
	CaughtUp      bool          `json:"caught_up"` // every held shard's last read found nothing new
	Applied       int64         `json:"entries_applied"`
	NewestApplied time.Time     `json:"newest_applied_entry_time"`
	Lag           time.Duration `json:"lag_ns"` // newest applied entry: applied time minus create time
	LagText       string        `json:"lag"`
	LastPass      time.Time     `json:"last_pass"`
}

// Compare compares a user's history (state st, items) with the ledger's
// entries, in version order, and returns what differs. History has what a
// projector writes: entries up to st.Version, a purchase's refunded amount
// being the sum of its refunds up to st.Version. A history behind the
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
	refunded := map[int64]decimal.Decimal{} // by purchase version, as of st.Version
	fold := State{UserID: user}
	for _, e := range entries {
		if e.Version > st.Version {
			break
		}
		if e.Type == ledger.EntryRefund {
			refunded[e.PurchaseVersion] = refunded[e.PurchaseVersion].Add(e.Amount)
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
		if e.Refundable() {
			if want := refunded[e.Version]; want.Equal(h.RefundedAmount) {
				h.RefundedAmount = e.RefundedAmount // equal, whatever the decimal's form
			} else {
				e.RefundedAmount = want
			}
		}
		// A grant's reversed amount changes with its reversals, and the
		// projection does not follow it (it keeps what the GRANT entry was
		// written with); the REVERSAL items themselves say what was taken
		// back. So it is not compared.
		h.ReversedAmount = e.ReversedAmount
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
	return b.String()
}
