// Package api serves the ledger over Connect (Connect/HTTP JSON, gRPC and
// gRPC-Web): it turns requests into domain calls, entries into messages, and
// domain errors into Connect codes, in one place (errors.go).
package api

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Ledger is what the service needs of a ledger store.
type Ledger interface {
	Apply(ctx context.Context, m ledger.Mutation) (ledger.Result, error)
	Balance(ctx context.Context, user string) (ledger.Account, error)
	Entries(ctx context.Context, user string, q ledger.EntryQuery) ([]ledger.Entry, string, error)
	Holds(ctx context.Context, user string, q ledger.HoldQuery) ([]ledger.Hold, string, error)
	// AccountAt and Statement answer GetBalance's as_of and GetStatement
	// (statement.go).
	AccountAt(ctx context.Context, user string, t time.Time) (ledger.Account, error)
	Statement(ctx context.Context, user string, q ledger.StatementQuery) (ledger.Statement, string, error)
}

// History is what the service needs of the history projection: its pages,
// and its state, read consistently, whose version is the last entry it has
// (ListHistory's min_version waits on it).
type History interface {
	List(ctx context.Context, user string, o ledger.HistoryQuery) ([]ledger.Entry, string, error)
	State(ctx context.Context, user string) (history.State, error)
}

// LedgerService implements pointledger.v1.LedgerService.
type LedgerService struct {
	ledger      Ledger
	history     History
	scale       int32
	expiry      ExpiryPolicy
	historyWait time.Duration // how long ListHistory waits for a min_version
	kinds       KindSource
	log         *slog.Logger
}

var _ pointledgerv1connect.LedgerServiceHandler = (*LedgerService)(nil)

// NewLedgerService serves l and h; amounts may have at most scale digits
// after the point.
func NewLedgerService(l Ledger, h History, scale int32, log *slog.Logger) *LedgerService {
	return &LedgerService{ledger: l, history: h, scale: scale, expiry: ExpiryPolicy{Now: time.Now}, historyWait: DefaultHistoryWait, log: log}
}

// SetExpiryPolicy sets when granted points expire (default: a grant without
// an expiry never expires; an expiry at most DefaultMaxExpiry ahead).
func (s *LedgerService) SetExpiryPolicy(p ExpiryPolicy) {
	if p.Now == nil {
		p.Now = time.Now
	}
	s.expiry = p
}

func (s *LedgerService) Grant(ctx context.Context, req *connect.Request[pb.GrantRequest]) (*connect.Response[pb.GrantResponse], error) {
	lr, err := grantRequest(req.Msg, s.expiry)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	res, err := s.apply(ctx, ledger.EntryGrant, lr)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GrantResponse{Entry: entryToProto(res.Entry), Balance: ledger.FormatAmount(res.Balance), Replayed: res.Replayed, Pending: ledger.FormatAmount(res.Pending)}), nil
}

func (s *LedgerService) Purchase(ctx context.Context, req *connect.Request[pb.PurchaseRequest]) (*connect.Response[pb.PurchaseResponse], error) {
	r := req.Msg
	res, err := s.apply(ctx, ledger.EntryPurchase, ledger.Request{
		UserID: r.UserId, RequestID: r.RequestId, Amount: r.Amount, OrderID: r.OrderId, Metadata: r.Metadata,
		MerchantID: r.MerchantId, Category: r.Category,
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.PurchaseResponse{Entry: entryToProto(res.Entry), Balance: ledger.FormatAmount(res.Balance), Replayed: res.Replayed}), nil
}

func (s *LedgerService) Refund(ctx context.Context, req *connect.Request[pb.RefundRequest]) (*connect.Response[pb.RefundResponse], error) {
	r := req.Msg
	res, err := s.apply(ctx, ledger.EntryRefund, ledger.Request{
		UserID: r.UserId, RequestID: r.RequestId, Amount: r.Amount, OrderID: r.OrderId, Metadata: r.Metadata,
		PurchaseRequestID: r.PurchaseRequestId,
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.RefundResponse{Entry: entryToProto(res.Entry), Balance: ledger.FormatAmount(res.Balance), Replayed: res.Replayed}), nil
}

// ReverseGrant takes back a grant's points: the rules are the domain's
// (ledger.Decide of a REVERSAL).
func (s *LedgerService) ReverseGrant(ctx context.Context, req *connect.Request[pb.ReverseGrantRequest]) (*connect.Response[pb.ReverseGrantResponse], error) {
	r := req.Msg
	res, err := s.apply(ctx, ledger.EntryReversal, ledger.Request{
		UserID: r.UserId, RequestID: r.RequestId, Amount: r.Amount, Metadata: r.Metadata, GrantRequestID: r.GrantRequestId, Reason: r.Reason,
	})
	if err != nil {
		return nil, err
	}
	b := balancesAfter(res)
	return connect.NewResponse(&pb.ReverseGrantResponse{
		Entry: entryToProto(res.Entry), Balance: b.balance, Available: b.available, Held: b.held, Pending: ledger.FormatAmount(res.Pending), Replayed: res.Replayed,
	}), nil
}

func (s *LedgerService) apply(ctx context.Context, t ledger.EntryType, r ledger.Request) (ledger.Result, error) {
	m, err := ledger.NewMutation(t, r, s.scale)
	if err != nil {
		return ledger.Result{}, s.toConnect(ctx, err)
	}
	res, err := s.ledger.Apply(ctx, m)
	if err != nil {
		return ledger.Result{}, s.toConnect(ctx, err)
	}
	return res, nil
}

func (s *LedgerService) GetBalance(ctx context.Context, req *connect.Request[pb.GetBalanceRequest]) (*connect.Response[pb.GetBalanceResponse], error) {
	r := req.Msg
	// A spend's place is checked as a spend's would be, before any read.
	if _, err := ledger.NewMutation(ledger.EntryPurchase, ledger.Request{UserID: r.UserId, RequestID: "balance", Amount: "1", MerchantID: r.MerchantId, Category: r.Category}, s.scale); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	a, now, err := s.balanceAt(ctx, r)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	kinds, err := s.pointKinds(ctx)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	at := a.At(now)
	return connect.NewResponse(&pb.GetBalanceResponse{
		UserId:    req.Msg.UserId,
		Balance:   ledger.FormatAmount(at.Balance),
		Version:   a.Version,
		Status:    statusToProto(a.Status),
		Expiring:  bucketsToProto(a.Expiring(now, 10)),
		Available: at.Available().String(),
		Held:      ledger.FormatAmount(at.Held),
		Pending:   ledger.FormatAmount(at.Pending),
		Maturing:  maturingToProto(a.Maturing(now, 10)),
		Kinds:     kindBalancesToProto(a.KindBalances(now, kinds)),
		Spendable: a.SpendableAt(now, kinds, r.MerchantId, r.Category).String(),
	}), nil
}

// pointKinds is the program's kinds as the service's source has them
// (SetKinds); none set: standard only.
func (s *LedgerService) pointKinds(ctx context.Context) (ledger.Kinds, error) {
	if s.kinds == nil {
		return nil, nil
	}
	return s.kinds.Kinds(ctx)
}

// SetKinds sets where GetBalance reads the program's point kinds (its
// kinds and spendable); unset, every point is standard.
func (s *LedgerService) SetKinds(k KindSource) { s.kinds = k }

// KindSource gives the program's point kinds as a store's cache has them
// (a snapshot within the store's refresh delay of the kinds' last change).
type KindSource interface {
	Kinds(ctx context.Context) (ledger.Kinds, error)
}

func kindBalancesToProto(kbs []ledger.KindBalance) []*pb.KindBalance {
	out := make([]*pb.KindBalance, len(kbs))
	for i, k := range kbs {
		out[i] = &pb.KindBalance{Kind: ledger.KindName(k.Kind), Balance: ledger.FormatAmount(k.Balance), Available: ledger.FormatAmount(k.Available), Held: ledger.FormatAmount(k.Held), Pending: ledger.FormatAmount(k.Pending)}
	}
	return out
}

func (s *LedgerService) ListEntries(ctx context.Context, req *connect.Request[pb.ListEntriesRequest]) (*connect.Response[pb.ListEntriesResponse], error) {
	q := ledger.EntryQuery{Page: ledger.Page{PageSize: int(req.Msg.PageSize), PageToken: req.Msg.PageToken}}
	entries, next, err := s.ledger.Entries(ctx, req.Msg.UserId, q)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	out := &pb.ListEntriesResponse{NextPageToken: next, Entries: make([]*pb.Entry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = entryToProto(e)
	}
	return connect.NewResponse(out), nil
}

func (s *LedgerService) ListHistory(ctx context.Context, req *connect.Request[pb.ListHistoryRequest]) (*connect.Response[pb.ListHistoryResponse], error) {
	r := req.Msg
	o := ledger.HistoryQuery{Page: ledger.Page{PageSize: int(r.PageSize), PageToken: r.PageToken}, OldestFirst: r.OldestFirst, Consistent: r.MinVersion > 0}
	for _, t := range r.Types {
		et, ok := entryTypeFromProto(t)
		if !ok {
			return nil, s.toConnect(ctx, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "types: %v is not an entry type", t))
		}
		// A type named twice filters the same; kept, each would cost an
		// operand of DynamoDB's IN (at most 100), and a long list failed.
		if !slices.Contains(o.Types, et) {
			o.Types = append(o.Types, et)
		}
	}
	for _, t := range []struct {
		ts   *timestamppb.Timestamp
		into *time.Time
		name string
	}{{r.StartTime, &o.Start, "start_time"}, {r.EndTime, &o.End, "end_time"}} {
		if t.ts == nil {
			continue
		}
		if err := t.ts.CheckValid(); err != nil {
			return nil, s.toConnect(ctx, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "%s: %v", t.name, err))
		}
		*t.into = t.ts.AsTime()
	}
	if r.MinVersion != 0 {
		// A malformed query is refused before the wait, not after it.
		if _, err := o.Check(r.UserId); err != nil {
			return nil, s.toConnect(ctx, err)
		}
		if err := s.awaitHistory(ctx, r.UserId, r.MinVersion); err != nil {
			return nil, s.toConnect(ctx, err)
		}
	}
	items, next, err := s.history.List(ctx, r.UserId, o)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	out := &pb.ListHistoryResponse{NextPageToken: next, Items: make([]*pb.HistoryItem, len(items))}
	for i, e := range items {
		out.Items[i] = historyItemToProto(e)
	}
	return connect.NewResponse(out), nil
}

func historyItemToProto(e ledger.Entry) *pb.HistoryItem {
	out := &pb.HistoryItem{
		EntryId:           e.ID,
		UserId:            e.UserID,
		Version:           e.Version,
		Type:              entryTypeToProto(e.Type),
		Amount:            ledger.FormatAmount(e.Amount),
		BalanceAfter:      ledger.FormatAmount(e.BalanceAfter),
		RequestId:         e.RequestID,
		OrderId:           e.OrderID,
		CreateTime:        timestamppb.New(e.CreateTime),
		Metadata:          e.Metadata,
		PurchaseRequestId: e.PurchaseRequestID,
		Reason:            e.Reason,
		ExpireTime:        timeToProto(e.ExpireTime),
		Draws:             drawsToProto(e.Draws),
		HoldRequestId:     e.HoldRequestID,
		Kind:              entryKind(e),
		MerchantId:        e.MerchantID,
		Category:          e.Category,
	}
	if e.MovesHeld() {
		out.HeldChange, out.HeldAfter = ledger.FormatAmount(e.HeldChange), ledger.FormatAmount(e.HeldAfter)
	}
	if e.MovesPending() {
		out.PendingChange, out.PendingAfter = ledger.FormatAmount(e.PendingChange), ledger.FormatAmount(e.PendingAfter)
		out.GrantRequestId = e.GrantRequestID
		out.EffectiveTime = timeToProto(e.EffectiveTime)
	}
	if e.Refundable() {
		out.RefundedAmount = ledger.FormatAmount(e.RefundedAmount)
		switch {
		case e.RefundedAmount.IsZero():
			out.RefundStatus = pb.RefundStatus_REFUND_STATUS_NOT_REFUNDED
		case e.RefundedAmount.LessThan(e.Amount.Neg()):
			out.RefundStatus = pb.RefundStatus_REFUND_STATUS_PARTIALLY_REFUNDED
		default:
			out.RefundStatus = pb.RefundStatus_REFUND_STATUS_REFUNDED
		}
	}
	if e.MovesPending() {
		out.PendingChange, out.PendingAfter = ledger.FormatAmount(e.PendingChange), ledger.FormatAmount(e.PendingAfter)
		out.GrantRequestId = e.GrantRequestID
		out.EffectiveTime = timeToProto(e.EffectiveTime)
	}
	if e.Type == ledger.EntryGrant {
		out.ReversedAmount = ledger.FormatAmount(e.ReversedAmount)
	}
	return out
}

func entryTypeFromProto(t pb.EntryType) (ledger.EntryType, bool) {
	switch t {
	case pb.EntryType_ENTRY_TYPE_GRANT:
		return ledger.EntryGrant, true
	case pb.EntryType_ENTRY_TYPE_PURCHASE:
		return ledger.EntryPurchase, true
	case pb.EntryType_ENTRY_TYPE_REFUND:
		return ledger.EntryRefund, true
	case pb.EntryType_ENTRY_TYPE_ADJUSTMENT:
		return ledger.EntryAdjustment, true
	case pb.EntryType_ENTRY_TYPE_EXPIRATION:
		return ledger.EntryExpiration, true
	case pb.EntryType_ENTRY_TYPE_HOLD:
		return ledger.EntryHold, true
	case pb.EntryType_ENTRY_TYPE_CAPTURE:
		return ledger.EntryCapture, true
	case pb.EntryType_ENTRY_TYPE_RELEASE:
		return ledger.EntryRelease, true
	case pb.EntryType_ENTRY_TYPE_MATURATION:
		return ledger.EntryMaturation, true
	case pb.EntryType_ENTRY_TYPE_REVERSAL:
		return ledger.EntryReversal, true
	case pb.EntryType_ENTRY_TYPE_UNSPECIFIED:
	}
	return "", false
}

func entryToProto(e ledger.Entry) *pb.Entry {
	out := &pb.Entry{
		EntryId:           e.ID,
		UserId:            e.UserID,
		Version:           e.Version,
		Type:              entryTypeToProto(e.Type),
		Amount:            ledger.FormatAmount(e.Amount),
		BalanceAfter:      ledger.FormatAmount(e.BalanceAfter),
		RequestId:         e.RequestID,
		OrderId:           e.OrderID,
		CreateTime:        timestamppb.New(e.CreateTime),
		Metadata:          e.Metadata,
		PurchaseRequestId: e.PurchaseRequestID,
		Reason:            e.Reason,
		ExplainsBalance:   e.ExplainsBalance,
		ExpireTime:        timeToProto(e.ExpireTime),
		Draws:             drawsToProto(e.Draws),
		HoldRequestId:     e.HoldRequestID,
		BudgetId:          e.BudgetID,
		Kind:              entryKind(e),
		MerchantId:        e.MerchantID,
		Category:          e.Category,
	}
	if e.MovesHeld() {
		out.HeldChange, out.HeldAfter = ledger.FormatAmount(e.HeldChange), ledger.FormatAmount(e.HeldAfter)
	}
	if e.Refundable() {
		out.RefundedAmount = ledger.FormatAmount(e.RefundedAmount)
	}
	if e.MovesPending() {
		out.PendingChange, out.PendingAfter = ledger.FormatAmount(e.PendingChange), ledger.FormatAmount(e.PendingAfter)
		out.GrantRequestId = e.GrantRequestID
		out.EffectiveTime = timeToProto(e.EffectiveTime)
	}
	if e.Type == ledger.EntryGrant {
		out.ReversedAmount = ledger.FormatAmount(e.ReversedAmount)
	}
	return out
}

// entryKind is the kind an entry shows: a credit's kind ("standard" for
// none), "" on other entries, whose draws carry their kinds.
func entryKind(e ledger.Entry) string {
	if e.Amount.IsPositive() && len(e.Draws) == 0 || e.PendingChange.IsPositive() || e.Type == ledger.EntryMaturation {
		return ledger.KindName(e.Kind)
	}
	return ""
}

func maturingToProto(ms []ledger.Maturity) []*pb.Maturity {
	out := make([]*pb.Maturity, len(ms))
	for i, m := range ms {
		out[i] = &pb.Maturity{EffectiveTime: timestamppb.New(m.EffectiveTime), Amount: ledger.FormatAmount(m.Amount)}
	}
	return out
}

func entryTypeToProto(t ledger.EntryType) pb.EntryType {
	switch t {
	case ledger.EntryGrant:
		return pb.EntryType_ENTRY_TYPE_GRANT
	case ledger.EntryPurchase:
		return pb.EntryType_ENTRY_TYPE_PURCHASE
	case ledger.EntryRefund:
		return pb.EntryType_ENTRY_TYPE_REFUND
	case ledger.EntryAdjustment:
		return pb.EntryType_ENTRY_TYPE_ADJUSTMENT
	case ledger.EntryExpiration:
		return pb.EntryType_ENTRY_TYPE_EXPIRATION
	case ledger.EntryHold:
		return pb.EntryType_ENTRY_TYPE_HOLD
	case ledger.EntryCapture:
		return pb.EntryType_ENTRY_TYPE_CAPTURE
	case ledger.EntryRelease:
		return pb.EntryType_ENTRY_TYPE_RELEASE
	case ledger.EntryMaturation:
		return pb.EntryType_ENTRY_TYPE_MATURATION
	case ledger.EntryReversal:
		return pb.EntryType_ENTRY_TYPE_REVERSAL
	}
	return pb.EntryType_ENTRY_TYPE_UNSPECIFIED
}

func statusToProto(s ledger.Status) pb.AccountStatus {
	switch s {
	case ledger.StatusActive:
		return pb.AccountStatus_ACCOUNT_STATUS_ACTIVE
	case ledger.StatusFrozen:
		return pb.AccountStatus_ACCOUNT_STATUS_FROZEN
	}
	return pb.AccountStatus_ACCOUNT_STATUS_UNSPECIFIED
}
