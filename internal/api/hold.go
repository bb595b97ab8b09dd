package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Checkout holds: Authorize, Capture, Void and ListHolds. The rules are the
// domain's (ledger.Decide); here requests become mutations and results
// become messages.

func (s *LedgerService) Authorize(ctx context.Context, req *connect.Request[pb.AuthorizeRequest]) (*connect.Response[pb.AuthorizeResponse], error) {
	r := req.Msg
	expire, spec, err := s.expiry.holdExpire(r.ExpireTime, r.Ttl)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	res, err := s.apply(ctx, ledger.EntryHold, ledger.Request{
		UserID: r.UserId, RequestID: r.RequestId, Amount: r.Amount, OrderID: r.OrderId, Metadata: r.Metadata,
		Expire: expire, ExpireSpec: spec, MerchantID: r.MerchantId, Category: r.Category,
	})
	if err != nil {
		return nil, err
	}
	b := balancesAfter(res)
	return connect.NewResponse(&pb.AuthorizeResponse{
		Hold: holdToProto(res.Hold, s.expiry.Now()), Balance: b.balance, Available: b.available, Held: b.held, Replayed: res.Replayed,
	}), nil
}

func (s *LedgerService) Capture(ctx context.Context, req *connect.Request[pb.CaptureRequest]) (*connect.Response[pb.CaptureResponse], error) {
	r := req.Msg
	res, err := s.apply(ctx, ledger.EntryCapture, ledger.Request{
		UserID: r.UserId, RequestID: r.RequestId, Amount: r.Amount, HoldRequestID: r.HoldRequestId, Metadata: r.Metadata,
	})
	if err != nil {
		return nil, err
	}
	b := balancesAfter(res)
	return connect.NewResponse(&pb.CaptureResponse{
		Entry: entryToProto(res.Entry), Hold: holdToProto(res.Hold, s.expiry.Now()),
		Balance: b.balance, Available: b.available, Held: b.held, Replayed: res.Replayed,
	}), nil
}

func (s *LedgerService) Void(ctx context.Context, req *connect.Request[pb.VoidRequest]) (*connect.Response[pb.VoidResponse], error) {
	r := req.Msg
	res, err := s.apply(ctx, ledger.EntryRelease, ledger.Request{
		UserID: r.UserId, RequestID: r.RequestId, HoldRequestID: r.HoldRequestId, Metadata: r.Metadata,
	})
	if err != nil {
		return nil, err
	}
	b := balancesAfter(res)
	return connect.NewResponse(&pb.VoidResponse{
		Entry: entryToProto(res.Entry), Hold: holdToProto(res.Hold, s.expiry.Now()),
		Balance: b.balance, Available: b.available, Held: b.held, Replayed: res.Replayed,
	}), nil
}

func (s *LedgerService) ListHolds(ctx context.Context, req *connect.Request[pb.ListHoldsRequest]) (*connect.Response[pb.ListHoldsResponse], error) {
	r := req.Msg
	q := ledger.HoldQuery{Page: ledger.Page{PageSize: int(r.PageSize), PageToken: r.PageToken}}
	for _, st := range r.States {
		hs, ok := holdStateFromProto(st)
		if !ok {
			return nil, s.toConnect(ctx, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "states: %v is not a hold state", st))
		}
		q.States = append(q.States, hs)
	}
	holds, next, err := s.ledger.Holds(ctx, r.UserId, q)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	now := s.expiry.Now()
	out := &pb.ListHoldsResponse{NextPageToken: next, Holds: make([]*pb.Hold, len(holds))}
	for i, h := range holds {
		out.Holds[i] = holdToProto(h, now)
	}
	return connect.NewResponse(out), nil
}

// balances are what a hold's, a capture's or a void's answer says of the
// account after the call: after everything it wrote (ledger.Result), which
// is more than its entry when an expiration follows it.
type balances struct{ balance, available, held string }

func balancesAfter(res ledger.Result) balances {
	return balances{res.Balance.String(), res.Balance.Sub(res.Held).String(), res.Held.String()}
}

// holdToProto is h as it is at now: a held hold at or past its expiry is
// EXPIRED, as the next write will record.
func holdToProto(h ledger.Hold, now time.Time) *pb.Hold {
	out := &pb.Hold{
		RequestId:  h.RequestID,
		UserId:     h.UserID,
		Amount:     h.Amount.String(),
		State:      holdStateToProto(h.StateAt(now)),
		ExpireTime: timeToProto(h.ExpireTime),
		OrderId:    h.OrderID,
		CreateTime: timestamppb.New(h.CreateTime),
		MerchantId: h.MerchantID,
		Category:   h.Category,
	}
	if h.State == ledger.HoldCaptured {
		out.CapturedAmount = h.CapturedAmount.String()
	}
	return out
}

var holdStates = map[ledger.HoldState]pb.HoldState{
	ledger.HoldHeld:     pb.HoldState_HOLD_STATE_HELD,
	ledger.HoldCaptured: pb.HoldState_HOLD_STATE_CAPTURED,
	ledger.HoldVoided:   pb.HoldState_HOLD_STATE_VOIDED,
	ledger.HoldExpired:  pb.HoldState_HOLD_STATE_EXPIRED,
}

func holdStateToProto(s ledger.HoldState) pb.HoldState { return holdStates[s] }

func holdStateFromProto(p pb.HoldState) (ledger.HoldState, bool) {
	for s, q := range holdStates {
		if q == p {
			return s, true
		}
	}
	return "", false
}
