package api_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
)

// A program with kinds through the API: limited-time points are spent
// first, store-only points only at their merchants, a refusal says what
// could be spent, GetBalance shows each kind, and kinds refuse what they
// should with their codes.
func TestPointKinds(t *testing.T) {
	t.Parallel()
	srv := servetest.New(t, servetest.Options{})
	ctx := context.Background()
	prio := func(n int32) *int32 { return &n }
	created, err := srv.Kinds.CreatePointKind(ctx, connect.NewRequest(&pb.CreatePointKindRequest{KindId: "limited", Priority: prio(10), ExcludedCategories: []string{"exchange"}, RequestId: "k1"}))
	if err != nil {
		t.Fatal(err)
	}
	if k := created.Msg.Kind; k.KindId != "limited" || k.Priority != 10 || k.CreateTime == nil || created.Msg.Replayed {
		t.Errorf("created %v", created.Msg)
	}
	again, err := srv.Kinds.CreatePointKind(ctx, connect.NewRequest(&pb.CreatePointKindRequest{KindId: "limited", Priority: prio(10), ExcludedCategories: []string{"exchange"}, RequestId: "k1"}))
	if err != nil || !again.Msg.Replayed {
		t.Errorf("the same creation again: %v, %v; want replayed", again, err)
	}
	if _, err := srv.Kinds.CreatePointKind(ctx, connect.NewRequest(&pb.CreatePointKindRequest{KindId: "shop", Merchants: []string{"m1"}, RequestId: "k2"})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req    *pb.CreatePointKindRequest
		code   connect.Code
		reason string
	}{
		{&pb.CreatePointKindRequest{KindId: "limited", RequestId: "k3"}, connect.CodeAlreadyExists, ledger.ReasonKindExists},
		{&pb.CreatePointKindRequest{KindId: "standard", RequestId: "k4"}, connect.CodeInvalidArgument, ledger.ReasonInvalidKind},
		{&pb.CreatePointKindRequest{KindId: "x", Priority: prio(101), RequestId: "k5"}, connect.CodeInvalidArgument, ledger.ReasonInvalidKind},
	} {
		_, err := srv.Kinds.CreatePointKind(ctx, connect.NewRequest(tc.req))
		if code, info := servetest.ErrorInfo(err); code != tc.code || info.GetReason() != tc.reason {
			t.Errorf("CreatePointKind %v = %v, want %v %s", tc.req, err, tc.code, tc.reason)
		}
	}
	list, err := srv.Kinds.ListPointKinds(ctx, connect.NewRequest(&pb.ListPointKindsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ks := list.Msg.Kinds; len(ks) != 3 || ks[0].KindId != "standard" || ks[0].Priority != 50 || ks[1].KindId != "limited" || ks[2].KindId != "shop" {
		t.Errorf("ListPointKinds = %v, want standard, limited, shop", ks)
	}
	if _, err := srv.Kinds.GetPointKind(ctx, connect.NewRequest(&pb.GetPointKindRequest{KindId: "nosuch"})); func() bool {
		code, info := servetest.ErrorInfo(err)
		return code != connect.CodeNotFound || info.GetReason() != ledger.ReasonKindNotFound
	}() {
		t.Errorf("GetPointKind of none = %v, want not_found KIND_NOT_FOUND", err)
	}
}

// Kinds spent through the API: limited-time points first, store-only
// points only at their merchants, a refusal says what could be spent, a
// refund gives back what was drawn, GetBalance shows each kind.
func TestPointKindsSpent(t *testing.T) {
	t.Parallel()
	srv := servetest.New(t, servetest.Options{})
	ctx := context.Background()
	prio := func(n int32) *int32 { return &n }
	for _, k := range []*pb.CreatePointKindRequest{
		{KindId: "limited", Priority: prio(10), ExcludedCategories: []string{"exchange"}, RequestId: "k1"},
		{KindId: "shop", Merchants: []string{"m1"}, RequestId: "k2"},
	} {
		if _, err := srv.Kinds.CreatePointKind(ctx, connect.NewRequest(k)); err != nil {
			t.Fatal(err)
		}
	}
	grant := func(id, amount, kind string, expire time.Time) {
		t.Helper()
		r := &pb.GrantRequest{UserId: "hanako", RequestId: id, Amount: amount, Kind: kind}
		if !expire.IsZero() {
			r.ExpireTime = timestamppb.New(expire)
		}
		res, err := srv.Ledger.Grant(ctx, connect.NewRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		if want := ledger.KindName(kind); res.Msg.Entry.Kind != want {
			t.Errorf("the grant's entry has kind %q, want %q", res.Msg.Entry.Kind, want)
		}
	}
	grant("g1", "100", "", time.Time{})
	grant("g2", "30", "limited", time.Now().Add(72*time.Hour))
	grant("g3", "20", "shop", time.Time{})
	var err error
	for range 2 {
		_, err = srv.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "hanako", RequestId: "g4", Amount: "1", Kind: "nosuch"}))
		if code, info := servetest.ErrorInfo(err); code != connect.CodeNotFound || info.GetReason() != ledger.ReasonKindNotFound {
			t.Fatalf("a grant of an unknown kind = %v, want not_found KIND_NOT_FOUND", err)
		}
	}
	if _, info := servetest.ErrorInfo(err); info.GetMetadata()["replayed"] != "true" {
		t.Errorf("the refused grant again is not replayed: %v", info)
	}

	p, err := srv.Ledger.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "hanako", RequestId: "p1", Amount: "40", MerchantId: "m9", Category: "food"}))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Msg.Entry.Draws; len(d) != 2 || d[0].Kind != "limited" || d[0].Amount != "30" || d[1].Kind != "standard" || d[1].Amount != "10" || p.Msg.Entry.MerchantId != "m9" || p.Msg.Entry.Category != "food" {
		t.Errorf("purchase at m9: %v, want 30 limited then 10 standard", p.Msg.Entry)
	}
	_, err = srv.Ledger.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "hanako", RequestId: "p2", Amount: "95", MerchantId: "m9"}))
	code, info := servetest.ErrorInfo(err)
	if code != connect.CodeFailedPrecondition || info.GetReason() != ledger.ReasonInsufficientBalance || info.GetMetadata()["spendable"] != "90" {
		t.Errorf("purchase of 95 at m9 = %v (%v), want INSUFFICIENT_BALANCE with spendable 90", err, info)
	}
	if _, err := srv.Ledger.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "hanako", RequestId: "p3", Amount: "95", MerchantId: "m1"})); err != nil {
		t.Errorf("purchase of 95 at m1, where the shop points count: %v", err)
	}
	bal, err := srv.Ledger.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "hanako", MerchantId: "m1"}))
	if err != nil {
		t.Fatal(err)
	}
	if bal.Msg.Spendable != "15" || len(bal.Msg.Kinds) != 1 || bal.Msg.Kinds[0].Kind != "standard" {
		t.Errorf("balance %v, want spendable 15, all standard (the shop points spent first at m1)", bal.Msg)
	}
	// A refund gives back exactly what the purchase drew.
	r, err := srv.Ledger.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: "hanako", RequestId: "r1", PurchaseRequestId: "p1", Amount: "40"}))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Msg.Entry.Draws; len(d) != 2 || d[0].Kind != "standard" || d[1].Kind != "limited" || d[1].Amount != "30" {
		t.Errorf("refund draws %v", d)
	}
	bal, err = srv.Ledger.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "hanako", Category: "exchange"}))
	if err != nil {
		t.Fatal(err)
	}
	if k := bal.Msg.Kinds; bal.Msg.Spendable != "25" || len(k) != 2 || k[0].Kind != "limited" || k[0].Balance != "30" || k[1].Kind != "standard" || k[1].Available != "25" {
		t.Errorf("balance for exchange %v, want spendable 25 (no limited points), limited 30 then standard 25", bal.Msg)
	}
	if e := bal.Msg.Expiring; len(e) != 1 || e[0].Kind != "limited" {
		t.Errorf("expiring %v, want the limited points", e)
	}
	// Bad places are refused before anything is read or written.
	_, err = srv.Ledger.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "hanako", RequestId: "p4", Amount: "1", MerchantId: string(make([]byte, 65))}))
	if code, _ := servetest.ErrorInfo(err); code != connect.CodeInvalidArgument {
		t.Errorf("a bad merchant_id = %v, want invalid_argument", err)
	}
}
