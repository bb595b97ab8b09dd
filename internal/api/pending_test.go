package api_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
)

// A grant with a return window through the API: pending in its entry and
// in GetBalance (with when it matures) until its effective time, spendable
// at it; a ttl counts from then; ReverseGrant answers the account after.
func TestPendingGrantAndItsReversal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now})
	window := 14 * 24 * time.Hour
	eff := clk.Now().Add(window)
	g, err := s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{
		UserId: "u", RequestId: "g", Amount: "30", OrderId: "order-1",
		EffectiveDelay: durationpb.New(window), Ttl: durationpb.New(time.Hour),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if e := g.Msg.Entry; e.Amount != "0" || e.PendingChange != "30" || e.PendingAfter != "30" || !e.EffectiveTime.AsTime().Equal(eff) ||
		!e.ExpireTime.AsTime().Equal(eff.Add(time.Hour)) || e.ReversedAmount != "0" || g.Msg.Balance != "0" || g.Msg.Pending != "30" {
		t.Fatalf("pending grant = %v; want amount 0, pending 30, effective in 14 days, expiring an hour after", g.Msg)
	}
	b := s.balance(t, "u")
	if b.Balance != "0" || b.Pending != "30" || len(b.Maturing) != 1 || !b.Maturing[0].EffectiveTime.AsTime().Equal(eff) || b.Maturing[0].Amount != "30" {
		t.Fatalf("balance = %v; want 0, 30 pending maturing at %s", b, eff)
	}
	s.grant(t, "u", "base", "5")
	r, err := s.client.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "u", GrantRequestId: "g", Amount: "10", RequestId: "ret-1", Reason: "returned"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := r.Msg.Entry; e.Type != pb.EntryType_ENTRY_TYPE_REVERSAL || e.Amount != "0" || e.PendingChange != "-10" || e.GrantRequestId != "g" ||
		r.Msg.Pending != "20" || r.Msg.Balance != "5" || r.Msg.Available != "5" || r.Msg.Held != "0" || r.Msg.Replayed {
		t.Fatalf("reversal = %v", r.Msg)
	}

	clk.Add(window) // exactly at the effective time: spendable, before any entry says so
	if b := s.balance(t, "u"); b.Balance != "25" || b.Pending != "0" || len(b.Maturing) != 0 {
		t.Fatalf("balance at maturity = %v; want 25, nothing pending", b)
	}
	if _, err := s.purchase("u", "p", "25"); err != nil {
		t.Fatal(err)
	}
	_, err = s.client.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "u", GrantRequestId: "g", RequestId: "ret-2"}))
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonInsufficientBalance {
		t.Errorf("reversal of spent points: %v, want failed_precondition INSUFFICIENT_BALANCE", err)
	}
	_, err = s.client.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "u", GrantRequestId: "nope", RequestId: "ret-3"}))
	if code, why := reason(err); code != connect.CodeNotFound || why != ledger.ReasonGrantNotFound {
		t.Errorf("reversal of no grant: %v, want not_found GRANT_NOT_FOUND", err)
	}
	es := s.entries(t, "u")
	if len(es) != 5 || es[3].Type != pb.EntryType_ENTRY_TYPE_MATURATION || es[3].Amount != "20" || es[3].PendingChange != "-20" || es[3].GrantRequestId != "g" {
		t.Errorf("entries %v; want GRANT, GRANT, REVERSAL, MATURATION of 20, PURCHASE", es)
	}
	h, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "u", OldestFirst: true, MinVersion: 5}))
	if err != nil {
		t.Fatal(err)
	}
	if it := h.Msg.Items; len(it) != 5 || it[0].PendingChange != "30" || !it[0].EffectiveTime.AsTime().Equal(eff) ||
		it[2].PendingChange != "-10" || it[2].GrantRequestId != "g" || it[3].GrantRequestId != "g" || it[3].PendingAfter != "0" {
		t.Errorf("history %v; want the pending grant, its reversal and maturation, each with its pending change and grant", it)
	}
	s.assertSound(t, "u")
}

// Bad effective times are refused, invalid_argument with their reason,
// and write nothing.
func TestPendingGrantRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now, Expiry: api.ExpiryPolicy{EffectiveMax: 30 * 24 * time.Hour}})
	now := clk.Now()
	for _, tc := range []struct {
		name   string
		r      *pb.GrantRequest
		reason string
	}{
		{"in the past", &pb.GrantRequest{EffectiveTime: timestamppb.New(now.Add(-time.Second))}, ledger.ReasonInvalidEffectiveTime},
		{"now", &pb.GrantRequest{EffectiveTime: timestamppb.New(now)}, ledger.ReasonInvalidEffectiveTime},
		{"a negative delay", &pb.GrantRequest{EffectiveDelay: durationpb.New(-time.Hour)}, ledger.ReasonInvalidEffectiveTime},
		{"beyond the maximum", &pb.GrantRequest{EffectiveDelay: durationpb.New(31 * 24 * time.Hour)}, ledger.ReasonInvalidEffectiveTime},
		{"both", &pb.GrantRequest{EffectiveDelay: durationpb.New(time.Hour), EffectiveTime: timestamppb.New(now.Add(time.Hour))}, ledger.ReasonInvalidEffectiveTime},
		{"expiring at it", &pb.GrantRequest{EffectiveDelay: durationpb.New(time.Hour), ExpireTime: timestamppb.New(now.Add(time.Hour))}, ledger.ReasonInvalidExpiry},
		{"expiring before it", &pb.GrantRequest{EffectiveDelay: durationpb.New(2 * time.Hour), ExpireTime: timestamppb.New(now.Add(time.Hour))}, ledger.ReasonInvalidExpiry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.srv.Snapshot()
			tc.r.UserId, tc.r.RequestId, tc.r.Amount = "u", "g", "1"
			_, err := s.client.Grant(ctx, connect.NewRequest(tc.r))
			if code, why := reason(err); code != connect.CodeInvalidArgument || why != tc.reason {
				t.Errorf("grant: %v, want invalid_argument %s", err, tc.reason)
			}
			s.assertWroteNothing(t, tc.name, before)
		})
	}
	// An adjustment takes an effective time as a grant does; a debit none.
	a, err := s.admin.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "u", RequestId: "a", Amount: "2", Reason: "goodwill", EffectiveDelay: durationpb.New(time.Hour)}))
	if err != nil || a.Msg.Entry.PendingChange != "2" || a.Msg.Pending != "2" {
		t.Fatalf("pending adjustment: %v, %v", a, err)
	}
	_, err = s.admin.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "u", RequestId: "d", Amount: "2", Debit: true, Reason: "x", EffectiveDelay: durationpb.New(time.Hour)}))
	if code, why := reason(err); code != connect.CodeInvalidArgument || why != ledger.ReasonInvalidEffectiveTime {
		t.Errorf("a pending debit: %v, want invalid_argument %s", err, ledger.ReasonInvalidEffectiveTime)
	}
}
