package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/migrations"
)

// The budget the load's campaign grants draw on (issue 26): small enough
// to run dry within the small run, on escrow shards that run dry at
// different times (grants of 5, 10 and 15 land on shards by their request
// ids), so that dry shards borrow from the others under the faults too.
const (
	faultBudget       = "fault-campaign"
	faultBudgetShards = 4
	faultBudgetTotal  = 60
	kindBudgetGrant   = "grant from the budget"
)

// waitDry lets the load go on until a grant from the budget was refused
// BUDGET_EXHAUSTED, however slow a busy machine makes it (bounded against
// a hang, not for speed): the checks then see it run dry under the faults.
func (l *load) waitDry() {
	for deadline := time.Now().Add(5 * time.Minute); l.dry.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
}

// nextBudgetGrant makes s a grant of 5, 10 or 15 from the budget.
func nextBudgetGrant(rng *rand.Rand, s *sent) {
	s.typ, s.kind, s.budget, s.amount = ledger.EntryGrant, kindBudgetGrant, faultBudget, decimal.NewFromInt(int64(5*(1+rng.IntN(3))))
}

// createBudget creates the budget through ledgerd with the admin token,
// through the proxy's faults: an answer lost is sent again with the same
// request id, which answers the budget, replayed.
func (s *services) createBudget(t *testing.T) {
	budgets := pointledgerv1connect.NewBudgetServiceClient(http.DefaultClient, s.apis[0], connect.WithInterceptors(auth.Bearer(s.adminToken)))
	req := &pb.CreateBudgetRequest{BudgetId: faultBudget, Amount: fmt.Sprint(faultBudgetTotal), RequestId: "create-" + faultBudget,
		Description: "the fault suite's campaign", Shards: faultBudgetShards}
	var err error
	for range maxAttempts {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = budgets.CreateBudget(ctx, connect.NewRequest(req))
		cancel()
		if err == nil || definite(connect.CodeOf(err).String()) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create budget %s: %v", faultBudget, err)
	}
}

// checkBudget checks the budget's books after the run, read from DynamoDB
// (not through the proxy): granted + remaining = total, never overspent,
// granted = the sum of the grants that name it, every acknowledged grant
// from it one entry naming it; every BUDGET_EXHAUSTED asked for more than
// was left even after the run (what was left only shrinks, so a refusal
// of less than what is left now was a refusal with room); and the budget
// ran dry during the run, some grants acknowledged and some refused.
func (s *services) checkBudget(t *testing.T, book []*sent, view ledgerView, v *verdict) string {
	store := dynamo.New(dynamolocal.NewClient(s.emu.Endpoint), dynamo.Options{Table: migrations.LedgerTable})
	b, err := store.Budget(context.Background(), faultBudget)
	if err != nil {
		t.Fatal(err)
	}
	total := decimal.NewFromInt(faultBudgetTotal)
	if !b.Total.Equal(total) || !b.Granted.Add(b.Remaining).Equal(b.Total) {
		v.violate("budget: granted %s + remaining %s, total %s: want a total of %s", b.Granted, b.Remaining, b.Total, total)
	}
	if b.Remaining.IsNegative() || b.Granted.GreaterThan(total) {
		v.violate("budget overspent: granted %s of %s", b.Granted, total)
	}
	sum := decimal.Zero
	for _, e := range view.byID {
		if e.BudgetID == faultBudget {
			sum = sum.Add(e.Amount)
		}
	}
	if !sum.Equal(b.Granted) {
		v.violate("budget: granted %s, the grants naming it sum to %s", b.Granted, sum)
	}
	var acked, exhausted int
	for _, r := range book {
		if r.kind != kindBudgetGrant {
			continue
		}
		k := r.user + "/" + r.id
		e, ok := view.byID[k]
		switch {
		case r.acked:
			acked++
			if !ok || e.BudgetID != faultBudget || view.counts[k] != 1 {
				v.violate("acknowledged grant %s from the budget: %d entries, naming budget %q", k, view.counts[k], e.BudgetID)
			}
		case r.reason == string(client.ReasonBudgetExhausted):
			exhausted++
			if ok {
				v.violate("grant %s refused BUDGET_EXHAUSTED has an entry", k)
			}
			if !r.amount.GreaterThan(b.Remaining) {
				v.violate("grant %s of %s refused BUDGET_EXHAUSTED, yet %s is left after the run", k, r.amount, b.Remaining)
			}
		}
	}
	if acked == 0 || exhausted == 0 {
		v.violate("the budget did not run dry under the faults: %d grants from it acknowledged, %d refused BUDGET_EXHAUSTED", acked, exhausted)
	}
	return fmt.Sprintf("budget %s on %d shards: %d grants acknowledged, %d refused BUDGET_EXHAUSTED; granted %s + remaining %s = total %s",
		faultBudget, faultBudgetShards, acked, exhausted, b.Granted, b.Remaining, b.Total)
}
