package check

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/loadtest/report"
)

// Budgets reads a budget (a *dynamo.Ledger on the run's tables).
type Budgets interface {
	Budget(ctx context.Context, id string) (ledger.Budget, error)
}

// campaignChecked are the checks of a campaign run, in words.
var campaignChecked = []string{
	"campaign: the budget's granted + remaining = total, and total is what it was created with",
	"campaign: the budget was never overspent (remaining >= 0)",
	"campaign: the budget's granted = the sum of the GRANT entries that name it",
	"campaign: every acknowledged grant from the budget is exactly one entry that names it; every other at most one",
	"campaign: BUDGET_EXHAUSTED only once the budget was granted to within one grant per shard: when the first was answered, and after the run",
}

// Campaign checks a campaign run's budget against the entries and the
// book, fills in f what the budget says after the run, and adds what it
// checked and found to inv.
func (c *Checker) Campaign(ctx context.Context, budgets Budgets, b *Book, f *report.Campaign, inv *report.Invariants) error {
	inv.Checked = append(inv.Checked, campaignChecked...)
	bud, err := budgets.Budget(ctx, f.BudgetID)
	if err != nil {
		return fmt.Errorf("read budget %s: %w", f.BudgetID, err)
	}
	f.Total, f.Granted, f.Remaining = bud.Total.String(), bud.Granted.String(), bud.Remaining.String()
	violate := func(format string, args ...any) {
		inv.Violations = append(inv.Violations, fmt.Sprintf("budget %s: ", f.BudgetID)+fmt.Sprintf(format, args...))
	}
	amount, err := decimal.NewFromString(f.GrantAmount)
	if err != nil {
		return fmt.Errorf("grant amount %q: %w", f.GrantAmount, err)
	}
	if created := amount.Mul(decimal.NewFromInt(f.Grants)); !bud.Total.Equal(created) {
		violate("total %s, created with %s", bud.Total, created)
	}
	if bud.Unbalanced() != nil {
		violate("granted %s + remaining %s != total %s", bud.Granted, bud.Remaining, bud.Total)
	}
	if bud.Remaining.IsNegative() || bud.Granted.GreaterThan(bud.Total) {
		violate("overspent: granted %s of a total of %s", bud.Granted, bud.Total)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	grants := map[string][]*sentRequest{} // the budget's grant requests, by user
	for _, s := range b.sent {
		if s.op.Kind == "grant" && s.op.Budget == f.BudgetID {
			grants[s.op.User] = append(grants[s.op.User], s)
		}
	}
	sum := decimal.Zero
	for _, user := range slices.Sorted(maps.Keys(grants)) {
		entries, err := c.Ledger.EntriesAfter(ctx, user, 0, math.MaxInt)
		if err != nil {
			return err
		}
		named := map[string]int{} // request id -> entries naming the budget
		for _, e := range entries {
			if e.BudgetID != f.BudgetID {
				continue
			}
			if e.Type == ledger.EntryGrant {
				sum = sum.Add(e.Amount).Add(e.PendingChange)
			}
			named[e.RequestID]++
		}
		for _, s := range grants[user] {
			n := named[s.op.RequestID]
			delete(named, s.op.RequestID)
			switch {
			case s.acks > 0 && n != 1:
				violate("acknowledged grant %s of %s has %d entries naming the budget", s.op.RequestID, user, n)
			case n > 1:
				violate("grant %s of %s (not acknowledged: %v) has %d entries naming the budget", s.op.RequestID, user, s.codes, n)
			}
		}
		for rid, n := range named {
			violate("%d entries of %s's request %s name the budget, which the campaign never sent", n, user, rid)
		}
	}
	if !sum.Equal(bud.Granted) {
		violate("granted %s, its GRANT entries sum to %s", bud.Granted, sum)
	}
	if !f.Exhausted {
		return nil
	}
	// Within one grant per shard: a dry shard borrows, so BUDGET_EXHAUSTED
	// should come only when all shards together cannot cover a grant; the
	// checks allow one grant's worth left on each shard.
	slack := amount.Mul(decimal.NewFromInt(int64(f.Shards)))
	if !bud.Remaining.LessThan(slack) {
		violate("BUDGET_EXHAUSTED answered, yet %s remains after the run (%d shards of grants of %s)", bud.Remaining, f.Shards, amount)
	}
	// When the first was decided, at most the grants sent before it was
	// answered had drawn on the budget: what was left then is at least the
	// total less those.
	if left := bud.Total.Sub(amount.Mul(decimal.NewFromInt(f.SentBeforeFirstExhausted))); !left.LessThan(slack) {
		violate("the first BUDGET_EXHAUSTED came when at least %s was left: only %d grants had been sent before its answer", left, f.SentBeforeFirstExhausted)
	}
	return nil
}
