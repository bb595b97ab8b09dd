package drive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// RequestTimeout bounds every request: one that takes longer counts as
// deadline_exceeded, an unknown outcome.
const RequestTimeout = 30 * time.Second

// ConnectExec sends ops to ledgerd.
type ConnectExec struct {
	c pointledgerv1connect.LedgerServiceClient

	mu   sync.Mutex
	last *pb.Entry // the last acknowledged purchase or capture, to time the projection
}

// NewConnectExec sends ops to ledgerd through c.
func NewConnectExec(c pointledgerv1connect.LedgerServiceClient) *ConnectExec {
	return &ConnectExec{c: c}
}

// Client is the ledgerd client x sends with, for the checks and notes that
// ask ledgerd after a run.
func (x *ConnectExec) Client() pointledgerv1connect.LedgerServiceClient { return x.c }

// LastSpent is the last purchase or capture ledgerd acknowledged to x.
func (x *ConnectExec) LastSpent() *pb.Entry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.last
}

// spent remembers e, an acknowledged purchase or capture, if it is the
// last so far.
func (x *ConnectExec) spent(e *pb.Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.last == nil || e.CreateTime.AsTime().After(x.last.CreateTime.AsTime()) {
		x.last = e
	}
}

func (x *ConnectExec) Do(ctx context.Context, o Op) Outcome {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var e *pb.Entry
	var h *pb.Hold // an Authorize is answered with its hold, not an entry
	var err error
	replayed := false
	switch o.Kind {
	case "grant":
		var res *connect.Response[pb.GrantResponse]
		req := &pb.GrantRequest{UserId: o.User, Amount: o.Amount.String(), RequestId: o.RequestID, BudgetId: o.Budget, Kind: o.PointKind}
		if o.TTL > 0 {
			req.Ttl = durationpb.New(o.TTL)
		}
		if o.Effective > 0 {
			req.EffectiveDelay = durationpb.New(o.Effective)
		}
		if res, err = x.c.Grant(ctx, connect.NewRequest(req)); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "purchase":
		var res *connect.Response[pb.PurchaseResponse]
		if res, err = x.c.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: o.User, Amount: o.Amount.String(), RequestId: o.RequestID,
			MerchantId: o.Merchant, Category: o.Category})); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "refund":
		var res *connect.Response[pb.RefundResponse]
		if res, err = x.c.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: o.User, Amount: o.Amount.String(), RequestId: o.RequestID, PurchaseRequestId: o.Purchase})); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "authorize":
		var res *connect.Response[pb.AuthorizeResponse]
		req := &pb.AuthorizeRequest{UserId: o.User, Amount: o.Amount.String(), RequestId: o.RequestID, OrderId: "order-" + o.RequestID,
			MerchantId: o.Merchant, Category: o.Category}
		if o.TTL > 0 {
			req.Ttl = durationpb.New(o.TTL)
		}
		if res, err = x.c.Authorize(ctx, connect.NewRequest(req)); err == nil {
			h, replayed = res.Msg.Hold, res.Msg.Replayed
		}
	case "capture":
		var res *connect.Response[pb.CaptureResponse]
		req := &pb.CaptureRequest{UserId: o.User, HoldRequestId: o.Hold, Amount: o.Amount.String(), RequestId: o.RequestID}
		if o.Whole {
			req.Amount = ""
		}
		if res, err = x.c.Capture(ctx, connect.NewRequest(req)); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "void":
		var res *connect.Response[pb.VoidResponse]
		if res, err = x.c.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: o.User, HoldRequestId: o.Hold, RequestId: o.RequestID})); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "reverse":
		var res *connect.Response[pb.ReverseGrantResponse]
		req := &pb.ReverseGrantRequest{UserId: o.User, GrantRequestId: o.Grant, Amount: o.Amount.String(), RequestId: o.RequestID, Reason: "returned"}
		if res, err = x.c.ReverseGrant(ctx, connect.NewRequest(req)); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "balance":
		_, err = x.c.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: o.User}))
	case "history":
		_, err = x.c.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: o.User, PageSize: 20}))
	default:
		err = connect.NewError(connect.CodeUnimplemented, fmt.Errorf("op %q", o.Kind))
	}
	if err != nil {
		return Outcome{Code: CodeOf(err), Unreachable: unreachable(err), Err: err.Error(), Reason: string(client.ReasonOf(err))}
	}
	out := Outcome{Code: "ok", Replayed: replayed}
	if e != nil {
		out.EntryID, out.Version = e.EntryId, e.Version
		if o.Kind == "purchase" || o.Kind == "capture" {
			x.spent(e)
		}
	}
	if h != nil {
		out.Expire = h.ExpireTime.AsTime()
	}
	return out
}

// CodeOf is the outcome code of a failed call: its Connect code, and
// deadline_exceeded for a call that timed out on this side.
func CodeOf(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded.String()
	}
	return connect.CodeOf(err).String()
}

// unreachable says whether a call's error is its connection's: refused (no
// process listens), reset or closed before the answer (the process died),
// rather than an answer.
func unreachable(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
