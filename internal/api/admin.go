package api

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/reconcile"
)

// AdminLedger is what the admin service needs of the ledger store.
type AdminLedger interface {
	Ledger
	SetStatus(ctx context.Context, user string, status ledger.Status, reason string) (ledger.Account, bool, error)
}

// AdminHistory is what the admin service needs of the history projection.
type AdminHistory interface {
	State(ctx context.Context, user string) (history.State, error)
	Rebuild(ctx context.Context, user string) error
	RebuildAll(ctx context.Context) (int, error)
}

// Reconciler runs reconciliations.
type Reconciler interface {
	Run(ctx context.Context, o reconcile.Options) (reconcile.Report, error)
}

// AdminService implements pointledger.v1.AdminService.
type AdminService struct {
	ledger    AdminLedger
	history   AdminHistory
	rec       Reconciler
	projector func() (history.ProjectorStatus, bool) // the projector in this process, if any
	scale     int32
	expiry    ExpiryPolicy
	log       *slog.Logger
}

var _ pointledgerv1connect.AdminServiceHandler = (*AdminService)(nil)

// NewAdminService returns the admin service; projector reports the status of
// the projector running in this process (false when none runs).
func NewAdminService(l AdminLedger, h AdminHistory, rec Reconciler, projector func() (history.ProjectorStatus, bool), scale int32, log *slog.Logger) *AdminService {
	return &AdminService{ledger: l, history: h, rec: rec, projector: projector, scale: scale, expiry: ExpiryPolicy{Now: time.Now}, log: log}
}

// SetExpiryPolicy sets the limits an adjustment's expiry is judged by (its
// DefaultTTL does not apply to adjustments).
func (s *AdminService) SetExpiryPolicy(p ExpiryPolicy) {
	if p.Now == nil {
		p.Now = time.Now
	}
	s.expiry = p
}

func (s *AdminService) Reconcile(ctx context.Context, req *connect.Request[pb.ReconcileRequest], stream *connect.ServerStream[pb.ReconcileResponse]) error {
	r := req.Msg
	o := reconcile.Options{User: r.UserId, Segments: int(r.Segments), Rate: int(r.Rate), RepairProjection: r.RepairProjection}
	if o.Segments < 0 || o.Segments > 64 || o.Rate < 0 {
		return toConnect(ctx, s.log, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "segments must be 0 to 64 and rate not negative"))
	}
	if r.AsOf != nil {
		at, err := timeField(r.AsOf, "as_of")
		if err != nil {
			return toConnect(ctx, s.log, err)
		}
		o.AsOf = at
	}
	var sendErr error
	o.Progress = func(p reconcile.Progress) {
		if sendErr == nil {
			sendErr = stream.Send(&pb.ReconcileResponse{Event: &pb.ReconcileResponse_Progress{Progress: &pb.ReconcileProgress{
				UsersChecked: p.Users, TotalUsers: p.TotalUsers, EntriesChecked: p.Entries, Findings: p.Findings,
			}}})
		}
	}
	rep, err := s.rec.Run(ctx, o)
	if err != nil {
		return toConnect(ctx, s.log, err)
	}
	if sendErr != nil {
		return sendErr
	}
	out := &pb.ReconcileReport{
		StartTime:      timestamppb.New(rep.StartTime),
		Duration:       durationpb.New(msDuration(rep.DurationMS)),
		UsersChecked:   rep.Users,
		EntriesChecked: rep.Entries,
		ItemsRead:      rep.ItemsRead,
		SumOfEntries:   rep.SumOfEntries,
		SumOfBalances:  rep.SumOfBalances,
		Clean:          rep.Clean,

		SumOfPending:        rep.SumOfPending,
		SumOfPendingChanges: rep.SumOfPendingChanges,
	}
	for _, f := range rep.Findings {
		out.Findings = append(out.Findings, &pb.Finding{UserId: f.UserID, BudgetId: f.BudgetID, Kind: f.Kind, Expected: f.Expected, Found: f.Found, Versions: f.Versions, Repaired: f.Repaired})
	}
	for _, b := range rep.Budgets {
		out.Budgets = append(out.Budgets, &pb.BudgetReport{
			BudgetId: b.BudgetID, Status: budgetStatusToProto(ledger.BudgetStatus(b.Status)), Total: b.Total, Granted: b.Granted,
			Remaining: b.Remaining, GrantsSum: b.GrantsSum, Liability: b.Liability, Breakage: b.Breakage,
		})
	}
	for _, m := range rep.Liability {
		out.Liability = append(out.Liability, &pb.MonthAmount{Month: m.Month, Amount: m.Amount, Kind: m.Kind})
	}
	for _, m := range rep.Breakage {
		out.Breakage = append(out.Breakage, &pb.MonthAmount{Month: m.Month, Amount: m.Amount, Kind: m.Kind})
	}
	for _, m := range rep.Pending {
		out.Pending = append(out.Pending, &pb.MonthAmount{Month: m.Month, Amount: m.Amount, Kind: m.Kind})
	}
	for _, a := range rep.Proposed {
		out.ProposedAdjustments = append(out.ProposedAdjustments, &pb.ProposedAdjustment{
			UserId: a.UserID, Amount: a.Amount, Debit: a.Debit, ExplainBalance: a.ExplainBalance,
			ExpectedBalance: a.ExpectedBalance, Reason: a.Reason, RequestId: a.RequestID,
		})
	}
	return stream.Send(&pb.ReconcileResponse{Event: &pb.ReconcileResponse_Report{Report: out}})
}

func (s *AdminService) Adjust(ctx context.Context, req *connect.Request[pb.AdjustRequest]) (*connect.Response[pb.AdjustResponse], error) {
	r := req.Msg
	lr, err := s.expiry.creditTimes(r.ExpireTime, r.Ttl, r.EffectiveTime, r.EffectiveDelay, false)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	lr.UserID, lr.RequestID, lr.Amount, lr.Metadata = r.UserId, r.RequestId, r.Amount, r.Metadata
	lr.BudgetID, lr.Kind = r.BudgetId, r.Kind
	lr.Debit, lr.Reason, lr.ExplainBalance, lr.ExpectedBalance = r.Debit, r.Reason, r.ExplainBalance, r.ExpectedBalance
	m, err := ledger.NewMutation(ledger.EntryAdjustment, lr, s.scale)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	res, err := s.ledger.Apply(ctx, m)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "adjustment", "user_id", m.UserID, "request_id", m.RequestID, "amount", res.Entry.Amount.String(),
		"explains_balance", m.ExplainBalance, "reason", m.Reason, "replayed", res.Replayed)
	return connect.NewResponse(&pb.AdjustResponse{Entry: entryToProto(res.Entry), Balance: res.Balance.String(), Replayed: res.Replayed, Pending: res.Pending.String()}), nil
}

func (s *AdminService) SetAccountStatus(ctx context.Context, req *connect.Request[pb.SetAccountStatusRequest]) (*connect.Response[pb.SetAccountStatusResponse], error) {
	var status ledger.Status
	switch req.Msg.Status {
	case pb.AccountStatus_ACCOUNT_STATUS_ACTIVE:
		status = ledger.StatusActive
	case pb.AccountStatus_ACCOUNT_STATUS_FROZEN:
		status = ledger.StatusFrozen
	default:
		return nil, toConnect(ctx, s.log, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidStatus, "status must be ACCOUNT_STATUS_ACTIVE or ACCOUNT_STATUS_FROZEN"))
	}
	acct, changed, err := s.ledger.SetStatus(ctx, req.Msg.UserId, status, req.Msg.Reason)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.SetAccountStatusResponse{UserId: req.Msg.UserId, Status: statusToProto(acct.Status), Changed: changed}), nil
}

func (s *AdminService) RebuildProjection(ctx context.Context, req *connect.Request[pb.RebuildProjectionRequest]) (*connect.Response[pb.RebuildProjectionResponse], error) {
	if u := req.Msg.UserId; u != "" {
		if err := ledger.ValidateUserID(u); err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		if err := s.history.Rebuild(ctx, u); err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		return connect.NewResponse(&pb.RebuildProjectionResponse{UsersRebuilt: 1}), nil
	}
	n, err := s.history.RebuildAll(ctx)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.RebuildProjectionResponse{UsersRebuilt: int64(n)}), nil
}

func (s *AdminService) GetProjectionStatus(ctx context.Context, req *connect.Request[pb.GetProjectionStatusRequest]) (*connect.Response[pb.GetProjectionStatusResponse], error) {
	out := &pb.GetProjectionStatusResponse{}
	if st, ok := s.projector(); ok {
		out.Running, out.Owner, out.Shards, out.CaughtUp, out.EntriesApplied = true, st.Owner, st.Shards, st.CaughtUp, st.Applied
		out.Lag = durationpb.New(st.Lag)
		if !st.NewestApplied.IsZero() {
			out.NewestAppliedEntryTime = timestamppb.New(st.NewestApplied)
		}
	}
	if u := req.Msg.UserId; u != "" {
		acct, err := s.ledger.Balance(ctx, u)
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		st, err := s.history.State(ctx, u)
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		out.UserLedgerVersion, out.UserHistoryVersion = acct.Version, st.Version
	}
	return connect.NewResponse(out), nil
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
