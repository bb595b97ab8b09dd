package reconcile

import (
	"context"
	"maps"
	"slices"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// BudgetReport is a budget as its store reads it, and what the users'
// entries show of it: the sum of the grants that name it, and what of
// their points is outstanding (liability) or expired unused (breakage),
// by ledger.BudgetShares.
type BudgetReport struct {
	BudgetID  string `json:"budget_id"`
	Status    string `json:"status"`
	Total     string `json:"total"`
	Granted   string `json:"granted"`
	Remaining string `json:"remaining"`
	// GrantsSum is the sum of the amounts of the grants that name it.
	GrantsSum string `json:"grants_sum"`
	Liability string `json:"liability"`
	Breakage  string `json:"breakage"`
}

// readBudgets reads every budget, by id.
func (p *pass) readBudgets(ctx context.Context) (map[string]ledger.Budget, error) {
	out := map[string]ledger.Budget{}
	token := ""
	for {
		bs, next, err := p.r.store.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageSize: ledger.MaxPageSize, PageToken: token}})
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			out[b.ID] = b
		}
		if token = next; token == "" {
			return out, nil
		}
	}
}

// checkBudgets proves every budget's books: granted + remaining = total,
// and granted = the sum of the grants that name it. The scan reads users
// one after another while grants go on, so the sum it finds lies between
// the budget's granted read before the scan (every grant committed by then
// is in a user read later) and its granted read after it (every grant the
// scan saw was committed by then); on a quiet ledger the two are one. A
// budget that is unbalanced is read once more before it is a finding, as
// a top-up between the reads of its item and of its shards would look in
// a store that reads them apart (the DynamoDB store reads its item and all
// the shards it has in one snapshot).
func (p *pass) checkBudgets(ctx context.Context, before map[string]ledger.Budget) error {
	after, err := p.readBudgets(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	shares := maps.Clone(p.shares)
	p.mu.Unlock()
	var findings []ledger.Finding
	var reports []BudgetReport
	for _, id := range slices.Sorted(maps.Keys(shares)) {
		if _, ok := after[id]; !ok {
			findings = append(findings, ledger.NoSuchBudget(id, shares[id].Granted))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(after)) {
		b := after[id]
		if b.Unbalanced() != nil {
			if b, err = p.r.store.Budget(ctx, id); err != nil {
				return err
			}
		}
		if f := b.Unbalanced(); f != nil {
			findings = append(findings, *f)
		}
		s := shares[id]
		low := decimal.Zero
		if was, ok := before[id]; ok {
			low = was.Granted
		}
		if f := b.GrantsDisagree(s.Granted, low); f != nil {
			findings = append(findings, *f)
		}
		reports = append(reports, BudgetReport{
			BudgetID: id, Status: string(b.Status), Total: b.Total.String(), Granted: b.Granted.String(), Remaining: b.Remaining.String(),
			GrantsSum: s.Granted.String(), Liability: s.Liability.String(), Breakage: s.Breakage.String(),
		})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budgets = reports
	p.findings = append(p.findings, findings...)
	p.findingCount.Add(int64(len(findings)))
	return nil
}
