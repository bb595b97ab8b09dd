package api_test

import (
	"context"
	"sync"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

func (s *testServer) setStatus(tb testing.TB, user string, status pb.AccountStatus) *pb.SetAccountStatusResponse {
	tb.Helper()
	res, err := s.admin.SetAccountStatus(context.Background(), connect.NewRequest(&pb.SetAccountStatusRequest{UserId: user, Status: status, Reason: "test"}))
	if err != nil {
		tb.Fatalf("set %s %s: %v", user, status, err)
	}
	return res.Msg
}

// Freezing stops spending only: grants, refunds and adjustments still apply,
// so a frozen user loses nothing owed to them.
func TestFrozenAccountsRefusePurchasesUntilUnfrozen(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	s.grant(t, "u1", "g", "100")
	if _, err := s.purchase("u1", "p1", "10"); err != nil {
		t.Fatal(err)
	}
	if res := s.setStatus(t, "u1", pb.AccountStatus_ACCOUNT_STATUS_FROZEN); !res.Changed || res.Status != pb.AccountStatus_ACCOUNT_STATUS_FROZEN {
		t.Fatalf("freeze = %v", res)
	}
	if res := s.setStatus(t, "u1", pb.AccountStatus_ACCOUNT_STATUS_FROZEN); res.Changed {
		t.Error("freezing a frozen account says it changed")
	}
	_, err := s.purchase("u1", "p2", "1")
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonAccountFrozen {
		t.Errorf("purchase on a frozen account: %v, want failed_precondition/%s", err, ledger.ReasonAccountFrozen)
	}
	s.grant(t, "u1", "g2", "5")
	if _, err := s.refund("u1", "r1", "p1", "10"); err != nil {
		t.Errorf("refund on a frozen account: %v", err)
	}
	if _, err := s.admin.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "u1", RequestId: "a1", Amount: "3", Debit: true, Reason: "chargeback"})); err != nil {
		t.Errorf("admin debit on a frozen account: %v", err)
	}
	bal, err := s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "u1"}))
	if err != nil || bal.Msg.Status != pb.AccountStatus_ACCOUNT_STATUS_FROZEN {
		t.Errorf("balance of a frozen account = %v, %v", bal, err)
	}

	s.setStatus(t, "u1", pb.AccountStatus_ACCOUNT_STATUS_ACTIVE)
	// The refused purchase stays refused; a new one goes through.
	_, err = s.purchase("u1", "p2", "1")
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonAccountFrozen || !replayedRefusal(err) {
		t.Errorf("the refused purchase again after unfreezing: %v, want failed_precondition/%s, replayed", err, ledger.ReasonAccountFrozen)
	}
	if _, err := s.purchase("u1", "p3", "1"); err != nil {
		t.Errorf("purchase after unfreezing: %v", err)
	}
	if bal := s.assertSound(t, "u1"); bal.String() != "101" {
		t.Errorf("balance = %s, want 100-10+5+10-3-1 = 101", bal)
	}

	_, err = s.admin.SetAccountStatus(ctx, connect.NewRequest(&pb.SetAccountStatusRequest{UserId: "nobody", Status: pb.AccountStatus_ACCOUNT_STATUS_FROZEN}))
	if code, _ := reason(err); code != connect.CodeNotFound {
		t.Errorf("freezing a user with no account: %v, want not_found", err)
	}
	_, err = s.admin.SetAccountStatus(ctx, connect.NewRequest(&pb.SetAccountStatusRequest{UserId: "u1"}))
	if code, _ := reason(err); code != connect.CodeInvalidArgument {
		t.Errorf("status unspecified: %v, want invalid_argument", err)
	}
	_, err = s.admin.SetAccountStatus(ctx, connect.NewRequest(&pb.SetAccountStatusRequest{UserId: "u1", Status: pb.AccountStatus_ACCOUNT_STATUS_FROZEN, Reason: "fraud\x1b[2J"}))
	if code, _ := reason(err); code != connect.CodeInvalidArgument {
		t.Errorf("a reason with control characters: %v, want invalid_argument", err)
	}
	if acct := s.assertSound(t, "u1"); acct.String() != "101" {
		t.Errorf("balance = %s after refused status changes, want 101", acct)
	}
}

// Two admins freezing and unfreezing at once: every transition is
// conditional on the status it replaces, so each response tells the truth
// about what it did, and the account ends in the state of the last change.
func TestAdminsRacingOnAStatus(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "u1", "g", "1")
	var mu sync.Mutex
	changes := map[pb.AccountStatus]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			st := pb.AccountStatus_ACCOUNT_STATUS_FROZEN
			if i%2 == 1 {
				st = pb.AccountStatus_ACCOUNT_STATUS_ACTIVE
			}
			res, err := s.admin.SetAccountStatus(context.Background(), connect.NewRequest(&pb.SetAccountStatusRequest{UserId: "u1", Status: st}))
			if err != nil {
				t.Error(err)
				return
			}
			if res.Msg.Status != st {
				t.Errorf("asked for %s, answered %s", st, res.Msg.Status)
			}
			if res.Msg.Changed {
				mu.Lock()
				changes[st]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Changes alternate, starting from active: freezes = unfreezes (+1 if it ends frozen).
	bal, err := s.client.GetBalance(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: "u1"}))
	if err != nil {
		t.Fatal(err)
	}
	want := changes[pb.AccountStatus_ACCOUNT_STATUS_ACTIVE]
	if bal.Msg.Status == pb.AccountStatus_ACCOUNT_STATUS_FROZEN {
		want++
	}
	if changes[pb.AccountStatus_ACCOUNT_STATUS_FROZEN] != want || want == 0 {
		t.Errorf("%d freezes and %d unfreezes changed the account, ending %s: changes must alternate",
			changes[pb.AccountStatus_ACCOUNT_STATUS_FROZEN], changes[pb.AccountStatus_ACCOUNT_STATUS_ACTIVE], bal.Msg.Status)
	}
}

func TestAdjust(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	s.grant(t, "u1", "g", "10")
	adjust := func(r *pb.AdjustRequest) (*pb.AdjustResponse, error) {
		res, err := s.admin.Adjust(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	res, err := adjust(&pb.AdjustRequest{UserId: "u1", RequestId: "a1", Amount: "2.5", Reason: "goodwill"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entry.Type != pb.EntryType_ENTRY_TYPE_ADJUSTMENT || res.Entry.Amount != "2.5" || res.Balance != "12.5" || res.Entry.Reason != "goodwill" {
		t.Errorf("credit = %v", res)
	}
	if again, err := adjust(&pb.AdjustRequest{UserId: "u1", RequestId: "a1", Amount: "2.5", Reason: "goodwill"}); err != nil || !again.Replayed {
		t.Errorf("the same adjustment again: %v, %v; want replayed", again, err)
	}
	_, err = adjust(&pb.AdjustRequest{UserId: "u1", RequestId: "a1", Amount: "2.5", Reason: "another reason"})
	if code, _ := reason(err); code != connect.CodeAlreadyExists {
		t.Errorf("request_id reused with another reason: %v, want already_exists", err)
	}
	_, err = adjust(&pb.AdjustRequest{UserId: "u1", RequestId: "a2", Amount: "13", Debit: true, Reason: "too much"})
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonInsufficientBalance {
		t.Errorf("debit below zero: %v, want failed_precondition/%s", err, ledger.ReasonInsufficientBalance)
	}
	for name, r := range map[string]*pb.AdjustRequest{
		"no reason":                  {UserId: "u1", RequestId: "a3", Amount: "1"},
		"blank reason":               {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "   "},
		"explain without balance":    {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExplainBalance: true},
		"expected balance alone":     {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExpectedBalance: "5"},
		"signed amount":              {UserId: "u1", RequestId: "a3", Amount: "-1", Reason: "r"},
		"explain with a bad balance": {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExplainBalance: true, ExpectedBalance: "x"},
		// Balances are written as amounts are: no exponent, sign or extra digits.
		"balance with an exponent":   {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExplainBalance: true, ExpectedBalance: "1e2"},
		"balance with a sign":        {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExplainBalance: true, ExpectedBalance: "+12.5"},
		"balance without a unit":     {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExplainBalance: true, ExpectedBalance: ".5"},
		"balance past the scale":     {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r", ExplainBalance: true, ExpectedBalance: "12.500"},
		"reason with a control char": {UserId: "u1", RequestId: "a3", Amount: "1", Reason: "r\x00"},
	} {
		if _, err := adjust(r); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	_, err = adjust(&pb.AdjustRequest{UserId: "u1", RequestId: "a4", Amount: "1", Reason: "r", ExplainBalance: true, ExpectedBalance: "99"})
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonBalanceMoved {
		t.Errorf("explaining a balance the account does not have: %v, want failed_precondition/%s", err, ledger.ReasonBalanceMoved)
	}
	// The review's reproduction: explaining a balance its entries add up to
	// would leave an entry no fold agrees with, for good.
	_, err = adjust(&pb.AdjustRequest{UserId: "u1", RequestId: "a5", Amount: "5", Reason: "explain nothing", ExplainBalance: true, ExpectedBalance: "12.5"})
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonNothingToExplain {
		t.Errorf("explaining a sound balance: %v, want failed_precondition/%s", err, ledger.ReasonNothingToExplain)
	}
	if bal := s.assertSound(t, "u1"); bal.String() != "12.5" {
		t.Errorf("balance = %s, want 12.5", bal)
	}
}

func TestReconcileStreamsProgressThenTheReport(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := context.Background()
	for _, u := range []string{"a", "b", "c"} {
		s.grant(t, u, "g", "10")
	}
	if _, err := s.admin.RebuildProjection(ctx, connect.NewRequest(&pb.RebuildProjectionRequest{})); err != nil {
		t.Fatal(err)
	}
	stream, err := s.admin.Reconcile(ctx, connect.NewRequest(&pb.ReconcileRequest{Segments: 2}))
	if err != nil {
		t.Fatal(err)
	}
	var progress int
	var report *pb.ReconcileReport
	for stream.Receive() {
		switch ev := stream.Msg().Event.(type) {
		case *pb.ReconcileResponse_Progress:
			progress++
		case *pb.ReconcileResponse_Report:
			report = ev.Report
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if progress == 0 || report == nil {
		t.Fatalf("%d progress messages, report %v; want both", progress, report)
	}
	if !report.Clean || report.UsersChecked != 3 || report.SumOfEntries != "30" || len(report.Findings) != 0 {
		t.Errorf("report = %v, want clean, 3 users, sum 30", report)
	}
	st, err := s.admin.GetProjectionStatus(ctx, connect.NewRequest(&pb.GetProjectionStatusRequest{UserId: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.Running || st.Msg.UserHistoryVersion != 1 || st.Msg.UserLedgerVersion != 1 {
		t.Errorf("projection status = %v, want not running here, user a at 1 and 1", st.Msg)
	}
}
