package ledger

import (
	"fmt"
	"slices"
	"strings"

	"github.com/shopspring/decimal"
)

// CheckFold compares an account, as a store keeps it, with the fold of the
// user's entries in version order (Account.Apply): the versions run 1..N,
// and the account has the fold's version, balance and buckets, and is not
// negative. It returns the fold and what differs; none for a sound
// account. It is the part of an audit that needs nothing of a store's
// layout: the in-memory reconciliation and the tests of every store
// (ledgertest.Contract) check accounts with it. The DynamoDB audit
// (dynamo.Ledger.Audit) does not call it: it folds in its own pass, with
// each entry's balance_after, and checks request records, refund caps and
// hold records besides.
func CheckFold(acct Account, entries []Entry) (Account, []Finding) {
	user := acct.UserID
	var out []Finding
	add := func(kind string, expected, found any, versions ...int64) {
		out = append(out, Finding{UserID: user, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
	}
	folded := NewAccount(user)
	for i, e := range entries {
		if want := int64(i + 1); e.Version != want {
			add(FindingVersionGap, want, e.Version, e.Version)
		}
		folded = folded.Apply(e)
	}
	if acct.Version != int64(len(entries)) || acct.Version != folded.Version {
		add(FindingVersionMismatch, len(entries), acct.Version, acct.Version)
	}
	if !acct.Balance.Equal(folded.Balance) {
		add(FindingBalanceMismatch, folded.Balance, acct.Balance, acct.Version)
	}
	if acct.Balance.IsNegative() {
		add(FindingNegativeBalance, ">= 0", acct.Balance, acct.Version)
	}
	if !slices.EqualFunc(acct.Buckets, folded.Buckets, func(a, b Bucket) bool { return a.Expire.Equal(b.Expire) && a.Amount.Equal(b.Amount) }) {
		add(FindingBuckets, bucketsText(folded.Buckets), bucketsText(acct.Buckets), acct.Version)
	}
	held := decimal.Zero
	for _, h := range acct.Holds {
		held = held.Add(h.Amount)
	}
	if !acct.Held.Equal(folded.Held) || !acct.Held.Equal(held) || acct.Held.GreaterThan(decimal.Max(acct.Balance, decimal.Zero)) {
		add(FindingHeld, fmt.Sprintf("%s, the fold's and its open holds' sum, at most the balance", folded.Held), fmt.Sprintf("%s, its open holds summing to %s", acct.Held, held), acct.Version)
	}
	if !slices.EqualFunc(acct.Holds, folded.Holds, func(a, b Hold) bool { return a.RequestID == b.RequestID && a.Amount.Equal(b.Amount) }) {
		add(FindingHolds, holdsText(folded.Holds), holdsText(acct.Holds), acct.Version)
	}
	return folded, out
}

func holdsText(hs []Hold) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.RequestID + ":" + h.Amount.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func bucketsText(bs []Bucket) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		e := "never"
		if !b.Expire.IsZero() {
			e = b.Expire.UTC().Format("2006-01-02T15:04:05.999999Z")
		}
		parts[i] = e + ":" + b.Amount.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}
