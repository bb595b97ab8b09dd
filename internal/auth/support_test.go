package auth_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/servetest"
)

// A support operator adjusts within its limits, and every adjustment it
// makes names it: over the limit of one adjustment, or of its day, it is
// refused and nothing is written; what is refused or replayed after the
// allowance was taken is given back.
func TestSupportLimits(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 23, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	allowances := auth.NewMemoryAllowances()
	srv := servetest.New(t, servetest.Options{Auth: a, Support: &auth.SupportLimits{
		PerAdjustment: decimal.RequireFromString("50"), PerDay: decimal.RequireFromString("100"), Allowances: allowances, Now: clock,
	}})
	s := &server{url: srv.URL, srv: srv, creds: creds, h2c: srv.H2C}
	ctx := context.Background()
	_, support := s.clients(creds.SupportToken)
	_, admin := s.clients(creds.AdminToken)
	adjust := func(c interface {
		Adjust(context.Context, *connect.Request[pb.AdjustRequest]) (*connect.Response[pb.AdjustResponse], error)
	}, amount, requestID string, md map[string]string,
	) (*pb.AdjustResponse, error) {
		res, err := c.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", Amount: amount, RequestId: requestID, Reason: "goodwill", Metadata: md}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}

	// The operator is on the entry, whatever the request said.
	res, err := adjust(support, "40", "s1", map[string]string{"operator": "someone-else", "ticket": "T-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Entry.Metadata; got["operator"] != "dev-support" || got["ticket"] != "T-1" {
		t.Errorf("metadata of a support adjustment: %v, want operator dev-support and the ticket kept", got)
	}
	// Its replay is not counted again: 40 + 50 + 10 = 100 fit the day.
	if res, err := adjust(support, "40", "s1", map[string]string{"operator": "someone-else", "ticket": "T-1"}); err != nil || !res.Replayed {
		t.Fatalf("replay: %v, %v", res, err)
	}

	for _, tt := range []struct {
		name, amount, reason string
	}{
		{"over one adjustment's limit", "50.01", auth.ReasonAdjustmentOverLimit},
		{"explaining a balance is an admin's", "", auth.ReasonRoleDenied},
	} {
		before := s.srv.Snapshot()
		var err error
		if tt.amount == "" {
			_, err = support.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", RequestId: "x-" + tt.name, Reason: "r", ExplainBalance: true, ExpectedBalance: "0"}))
		} else {
			_, err = adjust(support, tt.amount, "x-"+tt.name, nil)
		}
		if connect.CodeOf(err) != connect.CodePermissionDenied || reason(err) != tt.reason {
			t.Errorf("%s: %v (%s), want permission_denied %s", tt.name, err, reason(err), tt.reason)
		}
		if w := s.written(before); w != "" {
			t.Errorf("%s: refused, yet wrote %s", tt.name, w)
		}
	}

	// A refusal of the ledger's (a debit past the balance of 40) gives its
	// allowance back.
	if _, err := support.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", Amount: "50", RequestId: "debit", Reason: "r", Debit: true})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("a debit past the balance: %v", err)
	}
	if _, err := adjust(support, "50", "s2", nil); err != nil {
		t.Fatalf("50 more, 90 in all: %v", err)
	}
	before := s.srv.Snapshot()
	_, err = adjust(support, "10.01", "s3", nil)
	if connect.CodeOf(err) != connect.CodePermissionDenied || reason(err) != auth.ReasonDailyLimitReached {
		t.Errorf("past the day's 100: %v (%s), want %s", err, reason(err), auth.ReasonDailyLimitReached)
	}
	if w := s.written(before); w != "" {
		t.Errorf("past the day's limit, yet wrote %s", w)
	}
	if _, err := adjust(support, "10", "s4", nil); err != nil {
		t.Errorf("exactly to the day's 100: %v", err)
	}
	// An admin has no such limit; the next day (UTC) the operator has its
	// allowance again.
	if _, err := adjust(admin, "1000", "a1", nil); err != nil {
		t.Errorf("admin: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := adjust(support, "50", "s5", nil); err != nil {
		t.Errorf("the next day: %v", err)
	}
}

// A support operator's void names it; it may read the books, not repair
// the projection.
func TestSupportVoidsAndReconciles(t *testing.T) {
	t.Parallel()
	s := newSecureServer(t)
	creds := s.creds
	ctx := context.Background()
	svc, _ := s.clients(creds.ServiceToken)
	if _, err := svc.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "10", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}
	authorize(t, svc, "void")
	l, _ := s.clients(creds.SupportToken)
	v, err := l.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "alice", HoldRequestId: "h-void", RequestId: "v-void"}))
	if err != nil {
		t.Fatal(err)
	}
	if v.Msg.Entry.Metadata["operator"] != "dev-support" {
		t.Errorf("a support operator's void: metadata %v, want its operator", v.Msg.Entry.Metadata)
	}
	for _, repair := range []bool{false, true} {
		stream, err := s.adminClient(creds.SupportToken).Reconcile(ctx, connect.NewRequest(&pb.ReconcileRequest{RepairProjection: repair}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
		}
		if repair && connect.CodeOf(err) != connect.CodePermissionDenied || !repair && err != nil {
			t.Errorf("support reconciles, repair_projection %v: %v; want it to read the books, and not to repair", repair, err)
		}
	}
}

func (s *server) adminClient(token string) interface {
	Reconcile(context.Context, *connect.Request[pb.ReconcileRequest]) (*connect.ServerStreamForClient[pb.ReconcileResponse], error)
} {
	_, a := s.clients(token)
	return a
}

var _ = servetest.ErrorInfo
