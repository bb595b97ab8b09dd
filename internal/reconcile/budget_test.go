package reconcile

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// Reconciliation proves each budget's books, granted + remaining = total
// and granted = the sum of its grants less what was given back, reports
// its liability and breakage,
// and finds a shard edited by hand either way.
func TestBudgetsReconcile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ledgertest.CreateBudget(t, f.store, "spring", "100", 2)
	ledgertest.CreateBudget(t, f.store, "autumn", "50", 1)
	soon := time.Now().Add(time.Hour)
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "30", BudgetID: "spring", Expire: soon})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g1", Amount: "20", BudgetID: "spring"})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g2", Amount: "5"})
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "b", RequestID: "p1", Amount: "12"}) // 12 of the never bucket: spring's 20 first
	// An admin gives 5 back to spring: the oldest of b's points again.
	f.apply(t, ledger.EntryAdjustment, ledger.Request{UserID: "b", RequestID: "fix", Amount: "5", Debit: true, Reason: "granted twice", BudgetID: "spring"})
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	rep := f.run(t, Options{})
	if !rep.Clean {
		t.Fatalf("findings on a clean ledger: %v", rep.Findings)
	}
	want := []BudgetReport{
		{BudgetID: "autumn", Status: "OPEN", Total: "50", Granted: "0", Remaining: "50", GrantsSum: "0", Liability: "0", Breakage: "0"},
		{BudgetID: "spring", Status: "OPEN", Total: "100", Granted: "45", Remaining: "55", GrantsSum: "45", Liability: "33", Breakage: "0"},
	}
	if !slices.Equal(rep.Budgets, want) {
		t.Errorf("budgets %+v, want %+v", rep.Budgets, want)
	}

	// By hand: autumn's shard gains 5 that no top-up put in; spring's
	// shard 1 says 1 less granted and 1 more remaining than its grants.
	f.edit(t, "autumn", 0, "SET remaining = remaining + :n", "5")
	f.edit(t, "spring", 1, "SET granted = granted - :n, remaining = remaining + :n", "1")
	rep = f.run(t, Options{})
	var got []string
	for _, fd := range rep.Findings {
		got = append(got, fd.BudgetID+" "+fd.Kind)
	}
	if want := []string{"autumn budget_unbalanced", "spring budget_granted"}; !slices.Equal(got, want) || rep.Clean {
		t.Errorf("findings %v, want %v", rep.Findings, want)
	}
	// One user's reconciliation says nothing of budgets.
	if one := f.run(t, Options{User: "a"}); len(one.Budgets) != 0 || !one.Clean {
		t.Errorf("one user: budgets %v, findings %v", one.Budgets, one.Findings)
	}
}

// edit updates shard n of budget id by hand, with :n = n.
func (f *fixture) edit(t *testing.T, id string, shard int, update, n string) {
	t.Helper()
	_, err := f.env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &f.env.Ledger,
		Key: map[string]types.AttributeValue{
			"PK": str("BUDGET#" + id + "#" + string(rune('0'+shard))),
			"SK": str("S"),
		},
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": num(n)},
	})
	if err != nil {
		t.Fatal(err)
	}
}
