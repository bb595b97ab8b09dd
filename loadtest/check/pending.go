package check

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/loadtest/report"
)

// pendingChecked is what checkPending checks, in words.
const pendingChecked = "pending points (returns): each user's pending is what its entries fold to; no entry leaves the balance (pending excluded) below 0, so nothing pending was spent; no maturation before its effective time; a grant's reversals never take back more than it gave"

// checkPending checks one user's pending points in its entries and
// account: the account's pending is the fold's; the balance after every
// entry, which pending points are not in, is never negative (a purchase
// that spent points before they matured would leave it so, or be one
// more than the matured points paid for); a MATURATION is never written
// before its grant's effective time; a grant's reversals, pending and
// spendable parts together, stay within it. It counts what it saw into
// counts.
func checkPending(user string, acct, folded ledger.Account, entries []ledger.Entry, counts *report.Returns) []string {
	var out []string
	if !folded.Pending.Equal(acct.Pending) {
		out = append(out, fmt.Sprintf("%s: pending %s, its entries fold to %s", user, acct.Pending, folded.Pending))
	}
	gave := map[int64]decimal.Decimal{}     // grant version -> what it gave, pending or not
	reversed := map[int64]decimal.Decimal{} // and what its reversals took back
	for _, e := range entries {
		if e.BalanceAfter.IsNegative() {
			out = append(out, fmt.Sprintf("%s: balance %s after entry %d (%s): points spent that were not spendable", user, e.BalanceAfter, e.Version, e.Type))
		}
		switch e.Type {
		case ledger.EntryGrant:
			gave[e.Version] = e.Amount.Add(e.PendingChange)
			if e.PendingChange.IsPositive() {
				counts.PendingGrants++
			}
		case ledger.EntryMaturation:
			counts.Maturations++
			if e.CreateTime.Before(e.EffectiveTime) {
				out = append(out, fmt.Sprintf("%s: grant %s matured at %s, before its effective time %s", user, e.GrantRequestID,
					e.CreateTime.Format(time.RFC3339Nano), e.EffectiveTime.Format(time.RFC3339Nano)))
			}
		case ledger.EntryReversal:
			if !e.PendingChange.IsZero() {
				counts.OfPending++
			}
			if !e.Amount.IsZero() {
				counts.OfMatured++
			}
			reversed[e.GrantVersion] = reversed[e.GrantVersion].Sub(e.Amount).Sub(e.PendingChange)
			if reversed[e.GrantVersion].GreaterThan(gave[e.GrantVersion]) {
				out = append(out, fmt.Sprintf("%s: reversals of grant %s took back %s, it gave %s", user, e.GrantRequestID, reversed[e.GrantVersion], gave[e.GrantVersion]))
			}
		default: // nothing pending to check
		}
	}
	return out
}
