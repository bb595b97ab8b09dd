package affinity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

// caller sends one request to a peer, with header, and returns its answer.
type caller func(ctx context.Context, msg any, header http.Header) (connect.AnyResponse, error)

// routes are the procedures forwarded to the user's owner: the mutations
// that queue per user in the write path (the peer role may call exactly
// these: auth.PeerMayCall). Reads are consistent reads of DynamoDB, as good
// anywhere; SetAccountStatus is one conditional write that does not queue.
var routes = map[string]func(client connect.HTTPClient, url string) caller{
	pointledgerv1connect.LedgerServiceGrantProcedure:        unary[pb.GrantRequest, pb.GrantResponse],
	pointledgerv1connect.LedgerServicePurchaseProcedure:     unary[pb.PurchaseRequest, pb.PurchaseResponse],
	pointledgerv1connect.LedgerServiceRefundProcedure:       unary[pb.RefundRequest, pb.RefundResponse],
	pointledgerv1connect.LedgerServiceAuthorizeProcedure:    unary[pb.AuthorizeRequest, pb.AuthorizeResponse],
	pointledgerv1connect.LedgerServiceCaptureProcedure:      unary[pb.CaptureRequest, pb.CaptureResponse],
	pointledgerv1connect.LedgerServiceVoidProcedure:         unary[pb.VoidRequest, pb.VoidResponse],
	pointledgerv1connect.LedgerServiceReverseGrantProcedure: unary[pb.ReverseGrantRequest, pb.ReverseGrantResponse],
	pointledgerv1connect.AdminServiceAdjustProcedure:        unary[pb.AdjustRequest, pb.AdjustResponse],
}

// ForwardedProcedures are the procedures forwarded to their user's owner,
// sorted: the values of the procedure label of what Observer counts.
func ForwardedProcedures() []string { return slices.Sorted(maps.Keys(routes)) }

// unary calls url (a peer's base URL and a procedure) with the Connect
// protocol and binary protobuf, the cheapest to encode. The answer is a new
// response: the peer's HTTP headers are not the caller's.
func unary[Req, Res any](client connect.HTTPClient, url string) caller {
	c := connect.NewClient[Req, Res](client, url)
	return func(ctx context.Context, msg any, header http.Header) (connect.AnyResponse, error) {
		in, ok := msg.(*Req)
		if !ok {
			return nil, fmt.Errorf("forward to %s: the request is a %T", url, msg)
		}
		req := connect.NewRequest(in)
		maps.Copy(req.Header(), header)
		res, err := c.CallUnary(ctx, req)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(res.Msg), nil
	}
}

// Forwarder is the handlers' interceptor that sends a mutation to its
// user's owner when that is another instance. Put it after auth's
// interceptor: the caller is authenticated and authorized here, before
// anything is forwarded, and the owner trusts the peer token for that.
func (p *Peers) Forwarder() connect.Interceptor { return forwarder{p} }

type forwarder struct{ p *Peers }

// userMessage is a request that names its user.
type userMessage interface{ GetUserId() string }

func (f forwarder) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		procedure := req.Spec().Procedure
		if _, ok := routes[procedure]; !ok || req.Spec().IsClient || auth.Forwarded(ctx, req.Header()) {
			return next(ctx, req)
		}
		m, ok := req.Any().(userMessage)
		if !ok {
			return next(ctx, req)
		}
		owner, remote := f.p.Owner(m.GetUserId())
		if !remote {
			return next(ctx, req)
		}
		res, err := f.forward(ctx, owner, procedure, req.Any())
		if err == nil {
			return res, nil
		}
		var failure *forwardFailure
		if !errors.As(err, &failure) {
			return nil, err // the owner's answer, or the caller left
		}
		f.p.Failed(ctx, owner, failure.err)
		f.p.o.Log.DebugContext(ctx, "forward failed: committing here", "procedure", procedure, "peer", owner,
			"reason", failure.reason, "error", failure.err)
		if o := f.p.o.Observer; o != nil {
			o.ForwardFailed(failure.reason)
			o.FellBack(procedure)
		}
		return next(ctx, req)
	}
}

func (forwarder) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler forwards nothing: no streamed procedure mutates.
func (forwarder) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// forwardFailure is a forwarded call that got no answer from the owner.
type forwardFailure struct {
	reason string
	err    error
}

func (e *forwardFailure) Error() string { return e.reason + ": " + e.err.Error() }

// forward sends msg to owner within the forward timeout, and returns the
// owner's answer; a *forwardFailure if it gave none; or, if the caller
// left, its context's error.
func (f forwarder) forward(ctx context.Context, owner, procedure string, msg any) (connect.AnyResponse, error) {
	call, err := f.p.caller(owner, procedure)
	if err != nil {
		return nil, &forwardFailure{reason: FailUnreachable, err: err}
	}
	fctx, cancel := context.WithTimeout(ctx, f.p.o.Timeout)
	defer cancel()
	header := http.Header{auth.ForwardedHeader: {f.p.name()}}
	if f.p.bearer != "" {
		header.Set("Authorization", f.p.bearer)
	}
	res, err := call(fctx, msg, header)
	if err != nil && ctx.Err() != nil {
		// The caller left: its own answer, as the handler would give it.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	if err == nil {
		f.observe(procedure)
		return res, nil
	}
	if !connect.IsWireError(err) {
		reason := FailUnreachable
		if fctx.Err() != nil {
			reason = FailTimeout
		}
		return nil, &forwardFailure{reason: reason, err: err}
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		// This instance authorized the caller: the owner refused the peer
		// token (credentials that differ between instances).
		return nil, &forwardFailure{reason: FailRefused, err: err}
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		// The owner stopped waiting at the forward timeout, which the
		// call carried: it may commit still, as the caller's retry may.
		return nil, &forwardFailure{reason: FailTimeout, err: err}
	default:
		f.observe(procedure)
		return nil, answer(err)
	}
}

func (f forwarder) observe(procedure string) {
	if o := f.p.o.Observer; o != nil {
		o.Forwarded(procedure)
	}
}

// answer is the owner's error as this instance's: its code, message and
// details, without the owner's HTTP headers.
func answer(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}

// errNoPeer is a forwarded call's to a peer that left meanwhile.
var errNoPeer = errors.New("the peer left")

// caller returns the client of procedure on peer, made once per peer.
func (p *Peers) caller(peer, procedure string) (caller, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.state[peer]
	if !ok {
		return nil, errNoPeer
	}
	c, ok := s.callers[procedure]
	if !ok {
		c = routes[procedure](p.o.Client, peer+procedure)
		s.callers[procedure] = c
	}
	return c, nil
}

// name is how this instance signs what it forwards: its URL, or its id
// until it knows its URL.
func (p *Peers) name() string {
	if self := p.view.Load().self; self != "" {
		return self
	}
	return "instance " + p.id
}
