package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

// balanceAt is the account GetBalance answers and the time it answers it
// at: now, or as_of. As of a time, the account is the fold of the entries
// written by then (Ledger.AccountAt) with the account's status now, which
// no entry records.
func (s *LedgerService) balanceAt(ctx context.Context, r *pb.GetBalanceRequest) (ledger.Account, time.Time, error) {
	if r.AsOf == nil {
		a, err := s.ledger.Balance(ctx, r.UserId)
		return a, s.expiry.Now(), err
	}
	at, err := timeField(r.AsOf, "as_of")
	if err != nil {
		return ledger.Account{}, time.Time{}, err
	}
	a, err := s.ledger.AccountAt(ctx, r.UserId, at)
	if err != nil {
		return ledger.Account{}, time.Time{}, err
	}
	now, err := s.ledger.Balance(ctx, r.UserId)
	if err != nil {
		return ledger.Account{}, time.Time{}, err
	}
	a.Status = now.Status
	return a, ledger.Instant(at), nil
}

// timeField reads a timestamp field of a request, refusing one that is not
// a valid time.
func timeField(ts *timestamppb.Timestamp, name string) (time.Time, error) {
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "%s: %v", name, err)
	}
	return ts.AsTime(), nil
}

// GetStatement answers a page of a user's statement (ledger.Statement).
func (s *LedgerService) GetStatement(ctx context.Context, req *connect.Request[pb.GetStatementRequest]) (*connect.Response[pb.GetStatementResponse], error) {
	r := req.Msg
	q := ledger.StatementQuery{Page: ledger.Page{PageSize: int(r.PageSize), PageToken: r.PageToken}}
	for _, f := range []struct {
		ts   *timestamppb.Timestamp
		into *time.Time
		name string
	}{{r.StartTime, &q.Start, "start_time"}, {r.EndTime, &q.End, "end_time"}} {
		if f.ts == nil {
			continue // the query says what is missing
		}
		t, err := timeField(f.ts, f.name)
		if err != nil {
			return nil, s.toConnect(ctx, err)
		}
		*f.into = t
	}
	st, next, err := s.ledger.Statement(ctx, r.UserId, q)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	out := &pb.GetStatementResponse{
		OpeningBalance:   st.Opening.String(),
		ClosingBalance:   st.Closing.String(),
		UnrecordedChange: st.Unrecorded.String(),
		Totals: &pb.StatementTotals{
			Granted: st.Totals.Granted.String(), Matured: st.Totals.Matured.String(), Spent: st.Totals.Spent.String(),
			Refunded: st.Totals.Refunded.String(), Expired: st.Totals.Expired.String(), Adjusted: st.Totals.Adjusted.String(),
			Reversed: st.Totals.Reversed.String(),
		},
		Entries:       make([]*pb.Entry, len(st.Entries)),
		NextPageToken: next,
	}
	for i, e := range st.Entries {
		out.Entries[i] = entryToProto(e)
	}
	return connect.NewResponse(out), nil
}
