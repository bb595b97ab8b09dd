package check

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/loadtest/report"
)

// The names of the kinds checks, as the report shows them.
const (
	EligibleDrawsCheck = "no spend drew a kind ineligible for its merchant_id and category (by the kinds' rules as read after the run)"
	KindBalancesCheck  = "GetBalance's kinds = the kinds of the fold of each user's entries"
)

// Kinds checks the kinds scenario's users after a run, against the
// program's kinds ks as the ledger has them: that no purchase, hold or
// capture drew points of a kind ineligible where it spent (ledger's own
// PointKind.Eligible decides), and that each user's kinds as api's
// GetBalance answers them equal those of the fold of the user's entries.
// Each violation goes into inv; refusals are the scenario's purchases
// refused, by reason. The figures are the report's kinds section.
func (c *Checker) Kinds(ctx context.Context, ks ledger.Kinds, api pointledgerv1connect.LedgerServiceClient, users []string, refusals map[string]int64, inv *report.Invariants) (*report.Kinds, error) {
	inv.Checked = append(inv.Checked, "kinds: "+EligibleDrawsCheck, "kinds: "+KindBalancesCheck)
	out := &report.Kinds{DrawsByKind: map[string]string{}, Refusals: refusals}
	draws := map[string]decimal.Decimal{}
	eligible := report.KindCheck{Name: EligibleDrawsCheck}
	balances := report.KindCheck{Name: KindBalancesCheck}
	for _, user := range users {
		entries, err := c.Ledger.EntriesAfter(ctx, user, 0, math.MaxInt)
		if err != nil {
			return nil, err
		}
		n, bad := IneligibleDraws(user, entries, ks)
		eligible.Checked += n
		eligible.Violations += int64(len(bad))
		inv.Violations = append(inv.Violations, bad...)
		for _, e := range entries {
			if e.Type != ledger.EntryPurchase {
				continue
			}
			out.Purchases++
			for _, d := range e.Draws {
				draws[ledger.KindName(d.Kind)] = draws[ledger.KindName(d.Kind)].Add(d.Amount)
			}
		}
		folded, _, err := ledger.Fold(user, entries)
		if err != nil {
			continue // Check reports it
		}
		res, err := api.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
		if err != nil {
			return nil, fmt.Errorf("GetBalance %s: %w", user, err)
		}
		bad = KindBalancesDiffer(user, folded, time.Now(), ks, res.Msg.Kinds)
		balances.Checked++
		balances.Violations += int64(len(bad))
		inv.Violations = append(inv.Violations, bad...)
	}
	for k, d := range draws {
		out.DrawsByKind[k] = d.String()
	}
	out.Checks = []report.KindCheck{eligible, balances}
	slices.Sort(inv.Violations)
	return out, nil
}

// IneligibleDraws checks the draws of user's purchases, holds and
// captures: each must be of a kind ks knows that is eligible, by
// PointKind.Eligible, for the merchant_id and category the entry records.
// It returns how many draws it checked and a violation for each that is
// not.
func IneligibleDraws(user string, entries []ledger.Entry, ks ledger.Kinds) (checked int64, violations []string) {
	for _, e := range entries {
		if e.Type != ledger.EntryPurchase && e.Type != ledger.EntryHold && e.Type != ledger.EntryCapture {
			continue
		}
		for _, d := range e.Draws {
			checked++
			k, ok := ks.Get(d.Kind)
			switch {
			case !ok:
				violations = append(violations, fmt.Sprintf("%s: %s %d drew %s of kind %q, which the ledger does not know", user, e.Type, e.Version, d.Amount, d.Kind))
			case !k.Eligible(e.MerchantID, e.Category):
				violations = append(violations, fmt.Sprintf("%s: %s %d at merchant %q in category %q drew %s of kind %s, which is not eligible there",
					user, e.Type, e.Version, e.MerchantID, e.Category, d.Amount, ledger.KindName(d.Kind)))
			}
		}
	}
	return checked, violations
}

// KindBalancesDiffer compares got, a user's kinds as GetBalance answered
// them, with the kinds of folded (the fold of the user's entries) at now:
// a violation for each kind whose balance, available, held or pending
// points differ, or that one side has and the other lacks.
func KindBalancesDiffer(user string, folded ledger.Account, now time.Time, ks ledger.Kinds, got []*pb.KindBalance) []string {
	show := func(b, a, h, p string) string {
		return fmt.Sprintf("balance %s, available %s, held %s, pending %s", b, a, h, p)
	}
	want := map[string]string{}
	for _, kb := range folded.KindBalances(now, ks) {
		want[ledger.KindName(kb.Kind)] = show(kb.Balance.String(), kb.Available.String(), kb.Held.String(), kb.Pending.String())
	}
	var out []string
	for _, kb := range got {
		g := show(canonical(kb.Balance), canonical(kb.Available), canonical(kb.Held), canonical(kb.Pending))
		w, ok := want[kb.Kind]
		delete(want, kb.Kind)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: GetBalance has kind %s (%s), the fold of the entries has none of it", user, kb.Kind, g))
		case g != w:
			out = append(out, fmt.Sprintf("%s: GetBalance has kind %s at %s, the fold of the entries %s", user, kb.Kind, g, w))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		out = append(out, fmt.Sprintf("%s: the fold of the entries has kind %s (%s), GetBalance none of it", user, k, want[k]))
	}
	return out
}

// canonical is a decimal as decimal.String writes it ("1.50" -> "1.5"),
// or s itself if it is none.
func canonical(s string) string {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return s
	}
	return d.String()
}
