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

// PointKindService implements pointledger.v1.PointKindService over a
// store's kinds (ledger.PointKinds).
type PointKindService struct {
	kinds ledger.PointKinds
	log   *slog.Logger
}

var _ pointledgerv1connect.PointKindServiceHandler = (*PointKindService)(nil)

// NewPointKindService serves k.
func NewPointKindService(k ledger.PointKinds, log *slog.Logger) *PointKindService {
	return &PointKindService{kinds: k, log: log}
}

// PointKindServiceDescriptor describes PointKindService as the protos
// declare it.
func PointKindServiceDescriptor() protoreflect.ServiceDescriptor {
	return pb.File_pointledger_v1_kind_proto.Services().ByName("PointKindService")
}

func (s *PointKindService) CreatePointKind(ctx context.Context, req *connect.Request[pb.CreatePointKindRequest]) (*connect.Response[pb.CreatePointKindResponse], error) {
	r := req.Msg
	c, err := kindChange(r.RequestId, r.KindId, r.Description, r.Priority, r.Merchants, r.Categories, r.ExcludedCategories)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	k, replayed, err := s.kinds.CreatePointKind(ctx, c)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.CreatePointKindResponse{Kind: pointKindToProto(k), Replayed: replayed}), nil
}

func (s *PointKindService) UpdatePointKind(ctx context.Context, req *connect.Request[pb.UpdatePointKindRequest]) (*connect.Response[pb.UpdatePointKindResponse], error) {
	r := req.Msg
	c, err := kindChange(r.RequestId, r.KindId, r.Description, r.Priority, r.Merchants, r.Categories, r.ExcludedCategories)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	k, replayed, err := s.kinds.UpdatePointKind(ctx, c)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.UpdatePointKindResponse{Kind: pointKindToProto(k), Replayed: replayed}), nil
}

func (s *PointKindService) GetPointKind(ctx context.Context, req *connect.Request[pb.GetPointKindRequest]) (*connect.Response[pb.GetPointKindResponse], error) {
	if err := ledger.ValidateKindID(req.Msg.KindId); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	k, err := s.kinds.GetPointKind(ctx, ledger.KindID(req.Msg.KindId))
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&pb.GetPointKindResponse{Kind: pointKindToProto(k)}), nil
}

func (s *PointKindService) ListPointKinds(ctx context.Context, req *connect.Request[pb.ListPointKindsRequest]) (*connect.Response[pb.ListPointKindsResponse], error) {
	if req.Msg.PageToken != "" {
		return nil, toConnect(ctx, s.log, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken, "ListPointKinds has one page: page_token must be empty"))
	}
	ks, err := s.kinds.ListPointKinds(ctx)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &pb.ListPointKindsResponse{Kinds: make([]*pb.PointKind, len(ks))}
	for i, k := range ks {
		out.Kinds[i] = pointKindToProto(k)
	}
	return connect.NewResponse(out), nil
}

func pointKindToProto(k ledger.PointKind) *pb.PointKind {
	out := &pb.PointKind{
		KindId:             ledger.KindName(k.ID),
		Description:        k.Description,
		Priority:           int32(k.Priority), //nolint:gosec // 0 to ledger.MaxKindPriority
		Merchants:          k.Merchants,
		Categories:         k.Categories,
		ExcludedCategories: k.ExcludedCategories,
	}
	if !k.CreateTime.IsZero() {
		out.CreateTime = timestamppb.New(k.CreateTime)
		out.UpdateTime = timestamppb.New(k.UpdateTime)
	}
	return out
}

// kindChange is the change a CreatePointKind or UpdatePointKind asks for:
// the two requests carry the same fields.
func kindChange(requestID, kindID, description string, priority *int32, merchants, categories, excluded []string) (ledger.KindChange, error) {
	return ledger.NewKindChange(ledger.KindRequest{
		RequestID: requestID, KindID: kindID, Description: description, Priority: priority,
		Merchants: merchants, Categories: categories, ExcludedCategories: excluded,
	})
}
