package api_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
)

// A campaign through the API: a budget is created, granted from until it
// is exhausted, topped up and closed; refusals carry their codes and
// reasons, a refused grant sent again is the same refusal, replayed, and
// bad requests write nothing.
func TestBudgetCampaign(t *testing.T) {
	t.Parallel()
	srv := servetest.New(t, servetest.Options{})
	ctx := context.Background()
	budgets := srv.Budgets
	created, err := budgets.CreateBudget(ctx, connect.NewRequest(&pb.CreateBudgetRequest{BudgetId: "spring", Amount: "25", RequestId: "c1", Description: "spring sign-ups", Shards: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if b := created.Msg.Budget; b.Total != "25" || b.Remaining != "25" || b.Granted != "0" || b.Status != pb.BudgetStatus_BUDGET_STATUS_OPEN || b.Shards != 2 || created.Msg.Replayed {
		t.Errorf("created %v", created.Msg)
	}
	grant := func(user, id, amount string) (*pb.GrantResponse, error) {
		res, err := srv.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: user, RequestId: id, Amount: amount, BudgetId: "spring"}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	g, err := grant("alice", "g1", "20")
	if err != nil {
		t.Fatal(err)
	}
	if g.Entry.BudgetId != "spring" {
		t.Errorf("the grant's entry names budget %q", g.Entry.BudgetId)
	}
	for range 2 {
		_, err = grant("bob", "g2", "10")
		code, info := servetest.ErrorInfo(err)
		if code != connect.CodeFailedPrecondition || info.GetReason() != ledger.ReasonBudgetExhausted {
			t.Fatalf("grant of 10 from 5 left: %v, want failed_precondition %s", err, ledger.ReasonBudgetExhausted)
		}
		// What a program acts on, without parsing the message (issue 31),
		// the first time and replayed.
		if md := info.GetMetadata(); md["budget_id"] != "spring" || md["remaining"] != "5" {
			t.Errorf("BUDGET_EXHAUSTED metadata %v, want budget_id spring, remaining 5", md)
		}
	}
	if _, info := servetest.ErrorInfo(err); info.GetMetadata()["replayed"] != "true" {
		t.Errorf("the refused grant again is not marked replayed: %v", info)
	}
	_, err = grant("bob", "g3", "1")
	if code, info := servetest.ErrorInfo(err); err != nil {
		t.Fatalf("grant of 1 from 5 left: %v %v", code, info)
	}
	got, err := budgets.GetBudget(ctx, connect.NewRequest(&pb.GetBudgetRequest{BudgetId: "spring"}))
	if err != nil {
		t.Fatal(err)
	}
	if b := got.Msg.Budget; b.Granted != "21" || b.Remaining != "4" {
		t.Errorf("budget %v, want 21 granted and 4 remaining", b)
	}
	closed, err := budgets.CloseBudget(ctx, connect.NewRequest(&pb.CloseBudgetRequest{BudgetId: "spring"}))
	if err != nil || closed.Msg.Budget.Status != pb.BudgetStatus_BUDGET_STATUS_CLOSED {
		t.Fatalf("CloseBudget = %v, %v", closed, err)
	}
	_, err = grant("carol", "g4", "1")
	if code, info := servetest.ErrorInfo(err); code != connect.CodeFailedPrecondition || info.GetReason() != ledger.ReasonBudgetClosed ||
		info.GetMetadata()["budget_id"] != "spring" {
		t.Errorf("grant from a closed budget: %v, metadata %v; want budget_id spring", err, info.GetMetadata())
	}
	_, err = srv.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "carol", RequestId: "g5", Amount: "1", BudgetId: "autumn"}))
	if code, info := servetest.ErrorInfo(err); code != connect.CodeNotFound || info.GetReason() != ledger.ReasonBudgetNotFound ||
		info.GetMetadata()["budget_id"] != "autumn" {
		t.Errorf("grant from no budget: %v, metadata %v; want budget_id autumn", err, info.GetMetadata())
	}
	// An admin's correction gives 5 of alice's 20 back, to the closed
	// budget too.
	adj, err := srv.Admin.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", RequestId: "fix-1", Amount: "5", Debit: true, Reason: "granted twice", BudgetId: "spring"}))
	if err != nil || adj.Msg.Entry.BudgetId != "spring" || adj.Msg.Entry.Amount != "-5" {
		t.Fatalf("Adjust giving back = %v, %v", adj, err)
	}
	if _, err := srv.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", RequestId: "plain", Amount: "50"})); err != nil {
		t.Fatal(err)
	}
	_, err = srv.Admin.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", RequestId: "fix-2", Amount: "15.01", Debit: true, Reason: "more", BudgetId: "spring"}))
	if code, info := servetest.ErrorInfo(err); code != connect.CodeFailedPrecondition || info.GetReason() != ledger.ReasonGiveBackExceedsGrants {
		t.Errorf("giving back more than alice got: %v", err)
	}
	list, err := budgets.ListBudgets(ctx, connect.NewRequest(&pb.ListBudgetsRequest{}))
	if err != nil || len(list.Msg.Budgets) != 1 || list.Msg.Budgets[0].Granted != "16" || list.Msg.Budgets[0].Remaining != "9" || list.Msg.NextPageToken != "" {
		t.Errorf("ListBudgets = %v, %v", list, err)
	}
}

// Bad budget requests are invalid_argument with a reason, and write nothing.
func TestBudgetRequestsChecked(t *testing.T) {
	t.Parallel()
	srv := servetest.New(t, servetest.Options{})
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		req    *pb.CreateBudgetRequest
		reason string
	}{
		{"too many shards", &pb.CreateBudgetRequest{BudgetId: "b1", Amount: "10", RequestId: "r", Shards: ledger.MaxBudgetShards + 1}, ledger.ReasonInvalidBudget},
		{"no budget_id", &pb.CreateBudgetRequest{Amount: "10", RequestId: "r"}, ledger.ReasonInvalidBudget},
		{"a budget_id with #", &pb.CreateBudgetRequest{BudgetId: "b#1", Amount: "10", RequestId: "r"}, ledger.ReasonInvalidBudget},
		{"no amount", &pb.CreateBudgetRequest{BudgetId: "b1", RequestId: "r"}, ledger.ReasonInvalidAmount},
		{"no request_id", &pb.CreateBudgetRequest{BudgetId: "b1", Amount: "10"}, ledger.ReasonInvalidRequestID},
	} {
		_, err := srv.Budgets.CreateBudget(ctx, connect.NewRequest(tt.req))
		if code, info := servetest.ErrorInfo(err); code != connect.CodeInvalidArgument || info.GetReason() != tt.reason {
			t.Errorf("%s: %v, want invalid_argument %s", tt.name, err, tt.reason)
		}
	}
	if list, err := srv.Budgets.ListBudgets(ctx, connect.NewRequest(&pb.ListBudgetsRequest{})); err != nil || len(list.Msg.Budgets) != 0 {
		t.Errorf("refused creations left budgets: %v, %v", list, err)
	}
	before := srv.Snapshot()
	_, err := srv.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", RequestId: "g", Amount: "1", BudgetId: "b#1"}))
	if code, info := servetest.ErrorInfo(err); code != connect.CodeInvalidArgument || info.GetReason() != ledger.ReasonInvalidBudget {
		t.Errorf("a grant from budget b#1: %v", err)
	}
	if added, changed, removed := before.Diff(srv.Snapshot()); len(added)+len(changed)+len(removed) > 0 {
		t.Errorf("the refused grant wrote: %v %v %v", added, changed, removed)
	}
}
