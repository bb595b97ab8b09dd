package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pointledger/pointledger/internal/ledger"
)

// BudgetGaugeLimit bounds the budgets whose remaining is a series: the
// first ones ListBudgets lists (in budget_id order). A deployment with
// more reads the others with GetBudget or ListBudgets, and alerts on
// pointledger_refusals_total{reason="BUDGET_EXHAUSTED"}.
const BudgetGaugeLimit = 50

// budgetRefresh is how long the budgets read for one scrape serve the
// next: reading them costs a query and a read per budget.
const budgetRefresh = 30 * time.Second

var budgetRemainingDesc = prometheus.NewDesc("pointledger_budget_remaining",
	"What an open budget has left to grant (total - granted), read at most every 30 s, for the first 50 budgets by budget_id.",
	[]string{"budget_id"}, nil)

// budgetCollector reads the budgets when scraped, through list, at most
// every budgetRefresh.
type budgetCollector struct {
	list func(ctx context.Context, limit int) ([]ledger.Budget, error)
	now  func() time.Time

	mu      sync.Mutex
	read    time.Time
	budgets []ledger.Budget
}

// WatchBudgets serves pointledger_budget_remaining, per open budget of
// the first BudgetGaugeLimit that list returns. A failed read serves the
// last one read.
func (m *Metrics) WatchBudgets(list func(ctx context.Context, limit int) ([]ledger.Budget, error)) {
	m.registry.MustRegister(&budgetCollector{list: list, now: time.Now})
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- budgetRemainingDesc }

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.read.IsZero() || now.Sub(c.read) >= budgetRefresh {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		budgets, err := c.list(ctx, BudgetGaugeLimit)
		cancel()
		if err == nil {
			c.budgets, c.read = budgets, now
		}
	}
	for i, b := range c.budgets {
		if i == BudgetGaugeLimit {
			break
		}
		if b.Status != ledger.BudgetOpen {
			continue
		}
		ch <- prometheus.MustNewConstMetric(budgetRemainingDesc, prometheus.GaugeValue, b.Remaining.InexactFloat64(), b.ID)
	}
}
