package auth_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

// budgetCalls make one valid call of each BudgetService procedure, on
// budget "b-"+id (created first by the admin, except by CreateBudget).
var budgetCalls = []struct {
	name string
	call func(ctx context.Context, b pointledgerv1connect.BudgetServiceClient, id string) error
}{
	{"CreateBudget", func(ctx context.Context, b pointledgerv1connect.BudgetServiceClient, id string) error {
		_, err := b.CreateBudget(ctx, connect.NewRequest(&pb.CreateBudgetRequest{BudgetId: "new-" + id, Amount: "10", RequestId: "c-" + id}))
		return err
	}},
	{"TopUpBudget", func(ctx context.Context, b pointledgerv1connect.BudgetServiceClient, id string) error {
		_, err := b.TopUpBudget(ctx, connect.NewRequest(&pb.TopUpBudgetRequest{BudgetId: "b-" + id, Amount: "10", RequestId: "t-" + id}))
		return err
	}},
	{"CloseBudget", func(ctx context.Context, b pointledgerv1connect.BudgetServiceClient, id string) error {
		_, err := b.CloseBudget(ctx, connect.NewRequest(&pb.CloseBudgetRequest{BudgetId: "b-" + id}))
		return err
	}},
	{"GetBudget", func(ctx context.Context, b pointledgerv1connect.BudgetServiceClient, id string) error {
		_, err := b.GetBudget(ctx, connect.NewRequest(&pb.GetBudgetRequest{BudgetId: "b-" + id}))
		return err
	}},
	{"ListBudgets", func(ctx context.Context, b pointledgerv1connect.BudgetServiceClient, _ string) error {
		_, err := b.ListBudgets(ctx, connect.NewRequest(&pb.ListBudgetsRequest{}))
		return err
	}},
}

// Budgets are the admin's to change; the service may read them; users and
// peers may do neither. A refused change changes nothing.
func TestBudgetRoles(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	ctx := context.Background()
	admin := pointledgerv1connect.NewBudgetServiceClient(s.h2c, s.url, connect.WithInterceptors(auth.Bearer(s.creds.AdminToken)))
	callers := []struct {
		name  string
		token string
		want  map[string]bool // allowed
	}{
		{"service", s.creds.ServiceToken, map[string]bool{"GetBudget": true, "ListBudgets": true}},
		{"admin", s.creds.AdminToken, map[string]bool{"CreateBudget": true, "TopUpBudget": true, "CloseBudget": true, "GetBudget": true, "ListBudgets": true}},
		{"user", s.userToken(t, "alice", time.Hour), map[string]bool{}},
		{"peer", s.creds.PeerToken, map[string]bool{}},
		{"support", s.creds.SupportToken, map[string]bool{"GetBudget": true, "ListBudgets": true}},
	}
	for _, c := range callers {
		b := pointledgerv1connect.NewBudgetServiceClient(s.h2c, s.url, connect.WithInterceptors(auth.Bearer(c.token)))
		for _, proc := range budgetCalls {
			id := c.name + "-" + proc.name
			if _, err := admin.CreateBudget(ctx, connect.NewRequest(&pb.CreateBudgetRequest{BudgetId: "b-" + id, Amount: "100", RequestId: "setup"})); err != nil {
				t.Fatal(err)
			}
			err := proc.call(ctx, b, id)
			if c.want[proc.name] != (err == nil) || err != nil && connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("%s calls %s: %v, allowed: %v", c.name, proc.name, err, c.want[proc.name])
			}
			if err == nil {
				continue
			}
			got, gerr := admin.GetBudget(ctx, connect.NewRequest(&pb.GetBudgetRequest{BudgetId: "b-" + id}))
			if gerr != nil || got.Msg.Budget.Total != "100" || got.Msg.Budget.Status != pb.BudgetStatus_BUDGET_STATUS_OPEN {
				t.Errorf("%s calls %s: refused, yet the budget is %v, %v", c.name, proc.name, got, gerr)
			}
			if _, gerr := admin.GetBudget(ctx, connect.NewRequest(&pb.GetBudgetRequest{BudgetId: "new-" + id})); connect.CodeOf(gerr) != connect.CodeNotFound {
				t.Errorf("%s calls %s: refused, yet it created a budget (%v)", c.name, proc.name, gerr)
			}
		}
	}
}
