package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// A budget's remaining is a gauge (issue 31: nothing showed it), for open
// budgets only, at most BudgetGaugeLimit of them, read at most every 30 s.
func TestBudgetRemaining(t *testing.T) {
	t.Parallel()
	var budgets []ledger.Budget
	for i := range BudgetGaugeLimit + 5 {
		budgets = append(budgets, ledger.Budget{ID: fmt.Sprintf("b%03d", i), Remaining: decimal.NewFromInt(int64(i)), Status: ledger.BudgetOpen})
	}
	budgets[1].Status = ledger.BudgetClosed
	reads, limits := 0, 0
	at := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	c := &budgetCollector{now: func() time.Time { return at }, list: func(_ context.Context, limit int) ([]ledger.Budget, error) {
		reads, limits = reads+1, limit
		return budgets, nil
	}}
	if n := testutil.CollectAndCount(c); n != BudgetGaugeLimit-1 {
		t.Errorf("%d series, want %d (the first %d, less the closed one)", n, BudgetGaugeLimit-1, BudgetGaugeLimit)
	}
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		id := pb.GetLabel()[0].GetValue()
		if id == "b001" || id == "b050" {
			t.Errorf("series of %s: closed, or beyond the limit", id)
		}
		if id == "b002" && pb.GetGauge().GetValue() != 2 {
			t.Errorf("b002 remaining %v, want 2", pb.GetGauge().GetValue())
		}
	}
	at = at.Add(10 * time.Second)
	testutil.CollectAndCount(c)
	if reads != 1 || limits != BudgetGaugeLimit {
		t.Errorf("%d reads (limit %d) for scrapes within 30 s, want 1 of %d", reads, limits, BudgetGaugeLimit)
	}
	at = at.Add(30 * time.Second)
	testutil.CollectAndCount(c)
	if reads != 2 {
		t.Errorf("%d reads after 30 s, want 2", reads)
	}
}
