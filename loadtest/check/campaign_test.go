package check

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// A campaign's budget on DynamoDB Local, drawn on for real, and a book and
// figures that claim what the load test saw: the check finds an
// acknowledged grant with no entry, an entry of a grant never sent, and a
// BUDGET_EXHAUSTED while the budget still covered more than a grant per
// shard, after the run and (from the figures) when it was answered.
func TestCampaignFindsWhatTheBudgetAndTheBookDisagreeOn(t *testing.T) {
	env := dynamotest.New(t)
	ctx := context.Background()
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger})
	c := &Checker{Ledger: store}
	creation, err := ledger.NewBudgetCreation("launch", "create-launch", "60", "", 2, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.CreateBudget(ctx, creation); err != nil {
		t.Fatal(err)
	}
	grant := func(user, rid string) ledger.Entry {
		m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: rid, Amount: "10", BudgetID: "launch"}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Apply(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return res.Entry
	}
	send := func(b *Book, user, rid, code, reason string, e ledger.Entry) {
		o := drive.Op{Kind: "grant", User: user, RequestID: rid, Amount: decimal.NewFromInt(10), Budget: "launch"}
		b.Sending(o)
		b.Answered(o, drive.Outcome{Code: code, Reason: reason, EntryID: e.ID, Version: e.Version})
	}
	g1 := grant("alice", "g1")
	g2 := grant("bob", "g2") // applied, its answer lost
	grant("alice", "g3")     // applied, never sent by the load test
	b := NewBook()
	send(b, "alice", "g1", "ok", "", g1)
	send(b, "bob", "g2", "deadline_exceeded", "", g2)
	send(b, "alice", "g4", "ok", "", g1) // acknowledged, yet not in the ledger
	send(b, "bob", "g5", "failed_precondition", drive.ReasonBudgetExhausted, ledger.Entry{})

	tests := []struct {
		name string
		sent int64 // grants sent before the first BUDGET_EXHAUSTED was answered
		want []string
	}{
		{name: "first BUDGET_EXHAUSTED after every grant was sent", sent: 6, want: []string{
			"budget launch: 1 entries of alice's request g3 name the budget, which the campaign never sent",
			"budget launch: BUDGET_EXHAUSTED answered, yet 30 remains after the run (2 shards of grants of 10)",
			"budget launch: acknowledged grant g4 of alice has 0 entries naming the budget",
		}},
		{name: "first BUDGET_EXHAUSTED early", sent: 1, want: []string{
			"budget launch: 1 entries of alice's request g3 name the budget, which the campaign never sent",
			"budget launch: BUDGET_EXHAUSTED answered, yet 30 remains after the run (2 shards of grants of 10)",
			"budget launch: acknowledged grant g4 of alice has 0 entries naming the budget",
			"budget launch: the first BUDGET_EXHAUSTED came when at least 50 was left: only 1 grants had been sent before its answer",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := report.Campaign{BudgetID: "launch", Shards: 2, Grants: 6, GrantAmount: "10", Exhausted: true, SentBeforeFirstExhausted: tt.sent}
			var inv report.Invariants
			if err := c.Campaign(ctx, store, b, &f, &inv); err != nil {
				t.Fatal(err)
			}
			slices.Sort(inv.Violations)
			if !slices.Equal(tt.want, inv.Violations) {
				t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(inv.Violations, "\n"), strings.Join(tt.want, "\n"))
			}
			if f.Total != "60" || f.Granted != "30" || f.Remaining != "30" {
				t.Errorf("budget read as total %s, granted %s, remaining %s; want 60, 30, 30", f.Total, f.Granted, f.Remaining)
			}
		})
	}
}
