package api

import (
	"context"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
)

// BudgetService implements pointledger.v1.BudgetService over a store's
// budgets (ledger.Budgets).
type BudgetService struct {
	budgets ledger.Budgets
	scale   int32
	log     *slog.Logger
}

var _ pointledgerv1connect.BudgetServiceHandler = (*BudgetService)(nil)

// NewBudgetService serves b; amounts may have at most scale digits after
// the point.
func NewBudgetService(b ledger.Budgets, scale int32, log *slog.Logger) *BudgetService {
	return &BudgetService{budgets: b, scale: scale, log: log}
}

// BudgetServiceDescriptor describes BudgetService as the protos declare it.
func BudgetServiceDescriptor() protoreflect.ServiceDescriptor {
	return pb.File_pointledger_v1_budget_proto.Services().ByName("BudgetService")
}

func (s *BudgetService) CreateBudget(ctx context.Context, req *connect.Request[pb.CreateBudgetRequest]) (*connect.Response[pb.CreateBudgetResponse], error) {
	r := req.Msg
	c, err := ledger.NewBudgetCreation(r.BudgetId, r.RequestId, r.Amount, r.Description, int(r.Shards), s.scale)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	b, replayed, err := s.budgets.CreateBudget(ctx, c)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.CreateBudgetResponse{Budget: budgetToProto(b), Replayed: replayed}), nil
}

func (s *BudgetService) TopUpBudget(ctx context.Context, req *connect.Request[pb.TopUpBudgetRequest]) (*connect.Response[pb.TopUpBudgetResponse], error) {
	r := req.Msg
	u, err := ledger.NewBudgetTopUp(r.BudgetId, r.RequestId, r.Amount, s.scale)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	b, replayed, err := s.budgets.TopUpBudget(ctx, u)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.TopUpBudgetResponse{Budget: budgetToProto(b), Replayed: replayed}), nil
}

func (s *BudgetService) CloseBudget(ctx context.Context, req *connect.Request[pb.CloseBudgetRequest]) (*connect.Response[pb.CloseBudgetResponse], error) {
	b, replayed, err := s.budgets.CloseBudget(ctx, req.Msg.BudgetId)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.CloseBudgetResponse{Budget: budgetToProto(b), Replayed: replayed}), nil
}

func (s *BudgetService) GetBudget(ctx context.Context, req *connect.Request[pb.GetBudgetRequest]) (*connect.Response[pb.GetBudgetResponse], error) {
	b, err := s.budgets.Budget(ctx, req.Msg.BudgetId)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.GetBudgetResponse{Budget: budgetToProto(b)}), nil
}

func (s *BudgetService) ListBudgets(ctx context.Context, req *connect.Request[pb.ListBudgetsRequest]) (*connect.Response[pb.ListBudgetsResponse], error) {
	bs, next, err := s.budgets.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageSize: int(req.Msg.PageSize), PageToken: req.Msg.PageToken}})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &pb.ListBudgetsResponse{Budgets: make([]*pb.Budget, len(bs)), NextPageToken: next}
	for i, b := range bs {
		out.Budgets[i] = budgetToProto(b)
	}
	return connect.NewResponse(out), nil
}

func budgetToProto(b ledger.Budget) *pb.Budget {
	return &pb.Budget{
		BudgetId:    b.ID,
		Total:       b.Total.String(),
		Granted:     b.Granted.String(),
		Remaining:   b.Remaining.String(),
		Status:      budgetStatusToProto(b.Status),
		Description: b.Description,
		CreateTime:  timestamppb.New(b.CreateTime),
		Shards:      int32(b.Shards), //nolint:gosec // at most ledger.MaxBudgetShards
	}
}

func budgetStatusToProto(s ledger.BudgetStatus) pb.BudgetStatus {
	switch s {
	case ledger.BudgetOpen:
		return pb.BudgetStatus_BUDGET_STATUS_OPEN
	case ledger.BudgetClosed:
		return pb.BudgetStatus_BUDGET_STATUS_CLOSED
	}
	return pb.BudgetStatus_BUDGET_STATUS_UNSPECIFIED
}
