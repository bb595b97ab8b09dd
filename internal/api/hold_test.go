package api_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pointledger/pointledger/internal/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// A checkout over the wire, on DynamoDB: authorize, capture part, void,
// a hold that expires by the clock, the holds listed by state, and the
// refusals with their reasons, replayed as they were.
func TestHoldsOverTheWire(t *testing.T) {
	t.Parallel()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, serverOptions{now: clk.Now})
	ctx := context.Background()
	s.grant(t, "u1", "g", "100")
	authorize := func(id, amount string, ttl time.Duration) *pb.AuthorizeResponse {
		t.Helper()
		res, err := s.client.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: "u1", RequestId: id, Amount: amount, OrderId: "order-" + id, Ttl: durationpb.New(ttl)}))
		if err != nil {
			t.Fatalf("authorize %s: %v", id, err)
		}
		return res.Msg
	}
	capture := func(id, hold, amount string) (*pb.CaptureResponse, error) {
		res, err := s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "u1", RequestId: id, HoldRequestId: hold, Amount: amount}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	holds := func(states ...pb.HoldState) []string {
		t.Helper()
		res, err := s.client.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: "u1", States: states}))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range res.Msg.Holds {
			out = append(out, h.RequestId+":"+h.State.String())
		}
		return out
	}

	a := authorize("h1", "40", 10*time.Minute)
	if h := a.Hold; h.State != pb.HoldState_HOLD_STATE_HELD || h.Amount != "40" || h.OrderId != "order-h1" || a.Balance != "100" || a.Available != "60" || a.Held != "40" || a.Replayed {
		t.Errorf("authorize = %+v", a)
	}
	if again := authorize("h1", "40", 10*time.Minute); !again.Replayed || again.Hold.State != pb.HoldState_HOLD_STATE_HELD || again.Held != "40" {
		t.Errorf("the authorization again = %+v, want it replayed", again)
	}
	bal, err := s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "u1"}))
	if err != nil || bal.Msg.Available != "60" || bal.Msg.Held != "40" || bal.Msg.Balance != "100" {
		t.Fatalf("balance = %+v, %v; want 100, 60 available, 40 held", bal, err)
	}

	c, err := capture("c1", "h1", "25")
	if err != nil || c.Entry.Amount != "-25" || c.Entry.Type != pb.EntryType_ENTRY_TYPE_CAPTURE || c.Hold.State != pb.HoldState_HOLD_STATE_CAPTURED ||
		c.Hold.CapturedAmount != "25" || c.Balance != "75" || c.Available != "75" || c.Held != "0" {
		t.Fatalf("capture of 25 of 40 = %+v, %v", c, err)
	}
	for range 2 {
		if _, err := capture("c2", "h1", ""); !isRefusal(err, connect.CodeFailedPrecondition, ledger.ReasonHoldNotHeld) {
			t.Errorf("a second capture: %v, want failed_precondition %s", err, ledger.ReasonHoldNotHeld)
		}
	}
	if _, err := capture("c2", "h1", ""); !replayedRefusal(err) {
		t.Errorf("the refused capture again: %v, want it replayed", err)
	}
	if _, err := capture("c3", "nothing", ""); !isRefusal(err, connect.CodeNotFound, ledger.ReasonHoldNotFound) {
		t.Errorf("a capture of no hold: %v, want not_found %s", err, ledger.ReasonHoldNotFound)
	}

	authorize("h2", "10", 10*time.Minute)
	v, err := s.client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "u1", RequestId: "v2", HoldRequestId: "h2"}))
	if err != nil || v.Msg.Entry.Type != pb.EntryType_ENTRY_TYPE_RELEASE || v.Msg.Hold.State != pb.HoldState_HOLD_STATE_VOIDED || v.Msg.Held != "0" {
		t.Fatalf("void = %+v, %v", v, err)
	}

	authorize("h3", "5", time.Minute)
	if got := holds(); len(got) != 1 || got[0] != "h3:HOLD_STATE_HELD" {
		t.Errorf("open holds = %v, want h3", got)
	}
	clk.Add(time.Minute)
	if got := holds(); len(got) != 0 {
		t.Errorf("open holds at h3's expiry = %v, want none", got)
	}
	if got := holds(pb.HoldState_HOLD_STATE_EXPIRED); len(got) != 1 || got[0] != "h3:HOLD_STATE_EXPIRED" {
		t.Errorf("expired holds = %v, want h3", got)
	}
	if _, err := capture("c4", "h3", ""); !isRefusal(err, connect.CodeFailedPrecondition, ledger.ReasonHoldExpired) {
		t.Errorf("a capture at the hold's expiry: %v, want %s", err, ledger.ReasonHoldExpired)
	}
	if got := holds(pb.HoldState_HOLD_STATE_CAPTURED, pb.HoldState_HOLD_STATE_VOIDED); len(got) != 2 || got[0] != "h1:HOLD_STATE_CAPTURED" || got[1] != "h2:HOLD_STATE_VOIDED" {
		t.Errorf("captured and voided holds = %v, want h1 and h2", got)
	}
	if bal := s.assertSound(t, "u1"); bal.String() != "75" {
		t.Errorf("balance %s, want 75", bal)
	}
}

func isRefusal(err error, code connect.Code, why string) bool {
	c, r := reason(err)
	return err != nil && c == code && r == why
}
