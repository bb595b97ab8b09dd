package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
)

func (s *testServer) authorize(r *pb.AuthorizeRequest) (*pb.AuthorizeResponse, error) {
	res, err := s.client.Authorize(context.Background(), connect.NewRequest(r))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (s *testServer) balance(tb testing.TB, user string) *pb.GetBalanceResponse {
	tb.Helper()
	res, err := s.client.GetBalance(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		tb.Fatal(err)
	}
	return res.Msg
}

// A checkout through the API: the answers carry the hold and the balances,
// each call's refusals their codes and reasons, and replays their
// original answers.
func TestCheckout(t *testing.T) {
	t.Parallel()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now, Expiry: api.ExpiryPolicy{HoldTTL: 10 * time.Minute, HoldMax: time.Hour}})
	s.grant(t, "u", "g", "100")

	checkoutCaptured(t, s, clk)
	checkoutVoidedAndExpired(t, s, clk)
	checkResolvedHolds(t, s)
	checkHoldsHistory(t, s)
	s.assertSound(t, "u")
}

// checkoutCaptured holds 30 of u's 100 points, captures 25 of them, and
// refunds 5 of the capture.
func checkoutCaptured(tb testing.TB, s *testServer, clk *ledgertest.Clock) {
	tb.Helper()
	ctx := context.Background()
	a, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: "cart-1", Amount: "30", OrderId: "order-1"})
	if err != nil {
		tb.Fatal(err)
	}
	h := a.Hold
	if h.RequestId != "cart-1" || h.Amount != "30" || h.State != pb.HoldState_HOLD_STATE_HELD || h.OrderId != "order-1" ||
		!h.ExpireTime.AsTime().Equal(clk.Now().Add(10*time.Minute)) || a.Balance != "100" || a.Available != "70" || a.Held != "30" {
		tb.Fatalf("authorize = %v, want a hold of 30 for the default 10 minutes, balance 100, available 70, held 30", a)
	}
	if b := s.balance(tb, "u"); b.Balance != "100" || b.Available != "70" || b.Held != "30" {
		tb.Errorf("balance = %v, want 100, available 70, held 30", b)
	}
	if _, err := s.purchase("u", "p-too-much", "70.01"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		tb.Errorf("a purchase over what is available: %v, want failed_precondition", err)
	}

	c, err := s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "u", HoldRequestId: "cart-1", Amount: "25", RequestId: "pay-1"}))
	if err != nil {
		tb.Fatal(err)
	}
	if e := c.Msg.Entry; e.Type != pb.EntryType_ENTRY_TYPE_CAPTURE || e.Amount != "-25" || e.HeldChange != "-30" || e.HoldRequestId != "cart-1" ||
		c.Msg.Hold.State != pb.HoldState_HOLD_STATE_CAPTURED || c.Msg.Hold.CapturedAmount != "25" || c.Msg.Balance != "75" || c.Msg.Available != "75" || c.Msg.Held != "0" {
		tb.Fatalf("capture of 25 = %v", c.Msg)
	}
	again, err := s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "u", HoldRequestId: "cart-1", Amount: "25", RequestId: "pay-1"}))
	if err != nil || !again.Msg.Replayed || again.Msg.Entry.EntryId != c.Msg.Entry.EntryId {
		tb.Errorf("the capture again: %v, %v; want its replay", again, err)
	}
	_, err = s.client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "u", HoldRequestId: "cart-1", RequestId: "void-1"}))
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonHoldNotHeld {
		tb.Errorf("void of a captured hold: %v, want failed_precondition/%s", err, ledger.ReasonHoldNotHeld)
	}
	_, err = s.client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "u", HoldRequestId: "cart-1", RequestId: "void-1"}))
	if !replayedRefusal(err) {
		tb.Errorf("the refused void again: %v, want the refusal replayed", err)
	}
	if r, err := s.refund("u", "refund-1", "pay-1", "5"); err != nil || r.Balance != "80" {
		tb.Errorf("refund of the capture: %v, %v; want balance 80", r, err)
	}
}

// checkoutVoidedAndExpired holds 10 twice: one hold is voided, the other
// captured after its expiry.
func checkoutVoidedAndExpired(tb testing.TB, s *testServer, clk *ledgertest.Clock) {
	tb.Helper()
	ctx := context.Background()
	for _, id := range []string{"cart-2", "cart-3"} {
		if _, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: id, Amount: "10", Ttl: durationpb.New(time.Minute)}); err != nil {
			tb.Fatal(err)
		}
	}
	v, err := s.client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "u", HoldRequestId: "cart-2", RequestId: "void-2"}))
	if err != nil || v.Msg.Entry.Type != pb.EntryType_ENTRY_TYPE_RELEASE || v.Msg.Entry.Reason != ledger.ReleaseVoided || v.Msg.Hold.State != pb.HoldState_HOLD_STATE_VOIDED || v.Msg.Held != "10" {
		tb.Fatalf("void = %v, %v", v, err)
	}
	clk.Add(time.Minute)
	_, err = s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "u", HoldRequestId: "cart-3", RequestId: "pay-3"}))
	if code, why := reason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonHoldExpired {
		tb.Errorf("capture at the hold's expiry: %v, want failed_precondition/%s", err, ledger.ReasonHoldExpired)
	}
	if b := s.balance(tb, "u"); b.Balance != "80" || b.Available != "80" || b.Held != "0" {
		tb.Errorf("balance after the hold expired = %v, want 80, 80, 0 (by time, before any entry)", b)
	}
}

// checkResolvedHolds: no hold is open after the checkouts, and each is in
// its final state.
func checkResolvedHolds(tb testing.TB, s *testServer) {
	tb.Helper()
	ctx := context.Background()
	list := func(states ...pb.HoldState) []string {
		res, err := s.client.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: "u", States: states}))
		if err != nil {
			tb.Fatal(err)
		}
		var out []string
		for _, h := range res.Msg.Holds {
			out = append(out, fmt.Sprint(h.RequestId, " ", h.State))
		}
		return out
	}
	if got := list(); len(got) != 0 {
		tb.Errorf("open holds = %v, want none", got)
	}
	want := "[cart-1 HOLD_STATE_CAPTURED cart-2 HOLD_STATE_VOIDED cart-3 HOLD_STATE_EXPIRED]"
	if got := list(pb.HoldState_HOLD_STATE_CAPTURED, pb.HoldState_HOLD_STATE_VOIDED, pb.HoldState_HOLD_STATE_EXPIRED); fmt.Sprint(got) != want {
		tb.Errorf("resolved holds = %v, want %s", got, want)
	}
}

// checkHoldsHistory: the sweeper puts the expired hold on the record; the
// history shows each hold's life.
func checkHoldsHistory(tb testing.TB, s *testServer) {
	tb.Helper()
	ctx := context.Background()
	if _, err := s.srv.Store.Expire(ctx, "u"); err != nil {
		tb.Fatal(err)
	}
	res, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "u", OldestFirst: true,
		Types: []pb.EntryType{pb.EntryType_ENTRY_TYPE_HOLD, pb.EntryType_ENTRY_TYPE_CAPTURE, pb.EntryType_ENTRY_TYPE_RELEASE}}))
	if err != nil {
		tb.Fatal(err)
	}
	var life []string
	for _, it := range res.Msg.Items {
		life = append(life, fmt.Sprint(it.Type, " ", it.RequestId, it.HoldRequestId, " ", it.Amount, " ", it.HeldChange, " ", it.Reason))
	}
	wantLife := []string{
		"ENTRY_TYPE_HOLD cart-1 0 30 ", "ENTRY_TYPE_CAPTURE pay-1cart-1 -25 -30 ",
		"ENTRY_TYPE_HOLD cart-2 0 10 ", "ENTRY_TYPE_HOLD cart-3 0 10 ",
		"ENTRY_TYPE_RELEASE void-2cart-2 0 -10 VOIDED", "ENTRY_TYPE_RELEASE cart-3 0 -10 EXPIRED",
	}
	if fmt.Sprint(life) != fmt.Sprint(wantLife) {
		tb.Errorf("the holds' history:\n got %q\nwant %q", life, wantLife)
	}
}

// Bad hold requests are invalid_argument and write nothing.
func TestBadHoldRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now, Expiry: api.ExpiryPolicy{HoldMax: time.Hour}})
	ctx := context.Background()
	s.grant(t, "u", "g", "100")
	if _, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: "h", Amount: "1"}); err != nil {
		t.Fatal(err)
	}
	before := s.srv.Snapshot()
	for name, call := range map[string]func() error{
		"authorize, ttl beyond the max": func() error {
			_, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: "x", Amount: "1", Ttl: durationpb.New(2 * time.Hour)})
			return err
		},
		"authorize, expiry in the past": func() error {
			_, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: "x", Amount: "1", ExpireTime: timestamppb.New(clk.Now().Add(-time.Second))})
			return err
		},
		"authorize, no amount": func() error {
			_, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: "x"})
			return err
		},
		"capture, no hold named": func() error {
			_, err := s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "u", RequestId: "x"}))
			return err
		},
		"capture, negative amount": func() error {
			_, err := s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "u", RequestId: "x", HoldRequestId: "h", Amount: "-1"}))
			return err
		},
		"void, bad hold id": func() error {
			_, err := s.client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "u", RequestId: "x", HoldRequestId: "h#1"}))
			return err
		},
		"list, unknown state": func() error {
			_, err := s.client.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: "u", States: []pb.HoldState{pb.HoldState_HOLD_STATE_UNSPECIFIED}}))
			return err
		},
		"list, bad token": func() error {
			_, err := s.client.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: "u", PageToken: "nope"}))
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if added, changed, removed := before.Diff(s.srv.Snapshot()); len(added)+len(changed)+len(removed) > 0 {
		t.Errorf("bad hold requests wrote: added %v, changed %v, removed %v", added, changed, removed)
	}
}

// 200 concurrent authorizations of 1 against 100 available: exactly 100
// are held, and what is available never goes below 0.
func TestConcurrentAuthorizations(t *testing.T) {
	t.Parallel()
	s := newServerWith(t, servetest.Options{MaxHolds: 100})
	s.grant(t, "u", "g", "100")
	var wg sync.WaitGroup
	var mu sync.Mutex
	held, refused := 0, 0
	for i := range 200 {
		wg.Go(func() {
			res, err := s.authorize(&pb.AuthorizeRequest{UserId: "u", RequestId: fmt.Sprint("h", i), Amount: "1"})
			mu.Lock()
			defer mu.Unlock()
			switch code, why := reason(err); {
			case err == nil:
				held++
				if decimal.RequireFromString(res.Available).IsNegative() {
					t.Errorf("available %s after hold %d", res.Available, i)
				}
			case code == connect.CodeFailedPrecondition && why == ledger.ReasonInsufficientBalance:
				refused++
			default:
				t.Errorf("hold %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if b := s.balance(t, "u"); held != 100 || refused != 100 || b.Held != "100" || b.Available != "0" {
		t.Errorf("%d held, %d refused, balance %v; want 100, 100, held 100, available 0", held, refused, b)
	}
	s.assertSound(t, "u")
}
