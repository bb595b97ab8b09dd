package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

var _ ledger.Budgets = (*Ledger)(nil)

// TestBudgetContract runs the budgets' contract on DynamoDB Local, with
// group commit and without, and audits every user after each test.
func TestBudgetContract(t *testing.T) {
	t.Parallel()
	for _, maxBatch := range []int{0, 1} {
		t.Run(map[int]string{0: "grouped", 1: "max batch 1"}[maxBatch], func(t *testing.T) {
			t.Parallel()
			ledgertest.BudgetContract(t, func(t *testing.T, now func() time.Time) ledgertest.BudgetStore {
				env := dynamotest.New(t)
				l := New(env.Client, Options{Table: env.Ledger, Now: now, MaxBatch: maxBatch})
				t.Cleanup(func() { auditUsers(t, l) })
				return l
			})
		})
	}
}

// auditUsers audits every user of l's table, if it has any (a budget's
// tests may have none).
func auditUsers(t *testing.T, l *Ledger) {
	t.Helper()
	ctx := context.Background()
	err := l.Users(ctx, 1, nil, func(user string) error {
		a, err := l.Audit(ctx, user)
		for _, f := range a.Findings {
			t.Errorf("audit of %s: %s", user, f)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}
