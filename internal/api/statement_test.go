package api_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
)

// A month with an expiry: GetBalance as of a time answers what a read then
// did (the expired bucket out before its EXPIRATION is written), and
// GetStatement's balances, totals and unrecorded_change add up, on every
// page alike.
func TestBalanceAsOfAndStatement(t *testing.T) {
	t.Parallel()
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := ledgertest.NewClock(march.Add(-24 * time.Hour))
	s := newServerWith(t, servetest.Options{Now: clk.Now})
	ctx := context.Background()
	grant := func(id, amount string, expire time.Time) {
		t.Helper()
		r := &pb.GrantRequest{UserId: "u", RequestId: id, Amount: amount}
		if !expire.IsZero() {
			r.ExpireTime = timestamppb.New(expire)
		}
		if _, err := s.client.Grant(ctx, connect.NewRequest(r)); err != nil {
			t.Fatal(err)
		}
	}
	grant("g1", "100", march.Add(10*24*time.Hour)) // expires on 11 March
	grant("g2", "20", time.Time{})
	clk.Add(5 * 24 * time.Hour) // 5 March
	if _, err := s.client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "u", RequestId: "p1", Amount: "30"})); err != nil {
		t.Fatal(err)
	}
	clk.Add(40 * 24 * time.Hour) // 14 April: the EXPIRATION of March's 70 is written now
	grant("g3", "5", time.Time{})

	asOf := func(at time.Time) *pb.GetBalanceResponse {
		t.Helper()
		res, err := s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "u", AsOf: timestamppb.New(at)}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg
	}
	if b := asOf(march.Add(-48 * time.Hour)); b.Balance != "0" || b.Version != 0 || b.Available != "0" {
		t.Errorf("before the first entry: %v", b)
	}
	if b := asOf(march.Add(7 * 24 * time.Hour)); b.Balance != "90" || b.Version != 3 || len(b.Expiring) != 1 || b.Expiring[0].Amount != "70" {
		t.Errorf("on 8 March: %v; want 90, version 3, 70 expiring", b)
	}
	if b := asOf(march.Add(20 * 24 * time.Hour)); b.Balance != "20" || b.Version != 3 || len(b.Expiring) != 0 {
		t.Errorf("on 21 March, the EXPIRATION not yet written: %v; want 20, version 3", b)
	}
	if b := asOf(clk.Now()); b.Balance != "25" || b.Version != 5 {
		t.Errorf("now: %v; want 25, version 5", b)
	}

	q := &pb.GetStatementRequest{UserId: "u", StartTime: timestamppb.New(march), EndTime: timestamppb.New(march.AddDate(0, 1, 0)), PageSize: 1}
	var versions []int64
	for {
		res, err := s.client.GetStatement(ctx, connect.NewRequest(q))
		if err != nil {
			t.Fatal(err)
		}
		m := res.Msg
		if m.OpeningBalance != "120" || m.ClosingBalance != "20" || m.Totals.Spent != "-30" || m.Totals.Expired != "0" || m.UnrecordedChange != "-70" {
			t.Fatalf("March: %v; want 120 -> 20, spent -30, unrecorded -70", m)
		}
		for _, e := range m.Entries {
			versions = append(versions, e.Version)
		}
		if m.NextPageToken == "" {
			break
		}
		q.PageToken = m.NextPageToken
	}
	if len(versions) != 1 || versions[0] != 3 {
		t.Errorf("March's entries: versions %v, want [3]", versions)
	}
	april, err := s.client.GetStatement(ctx, connect.NewRequest(&pb.GetStatementRequest{
		UserId: "u", StartTime: timestamppb.New(march.AddDate(0, 1, 0)), EndTime: timestamppb.New(march.AddDate(0, 2, 0)),
	}))
	if m := april.Msg; err != nil || m.OpeningBalance != "20" || m.ClosingBalance != "25" || m.Totals.Expired != "-70" || m.Totals.Granted != "5" || m.UnrecordedChange != "70" || len(m.Entries) != 2 {
		t.Errorf("April: %v, %v; want 20 -> 25, expired -70, granted 5, unrecorded 70", april, err)
	}

	for name, r := range map[string]*pb.GetStatementRequest{
		"no end":        {UserId: "u", StartTime: timestamppb.New(march)},
		"no start":      {UserId: "u", EndTime: timestamppb.New(march)},
		"end = start":   {UserId: "u", StartTime: timestamppb.New(march), EndTime: timestamppb.New(march)},
		"invalid time":  {UserId: "u", StartTime: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}, EndTime: timestamppb.New(march)},
		"a bad user id": {UserId: "u#1", StartTime: timestamppb.New(march), EndTime: timestamppb.New(march.Add(time.Hour))},
		"a bad token":   {UserId: "u", StartTime: timestamppb.New(march), EndTime: timestamppb.New(march.Add(time.Hour)), PageToken: "x"},
	} {
		if _, err := s.client.GetStatement(ctx, connect.NewRequest(r)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if _, err := s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "u", AsOf: &timestamppb.Timestamp{Nanos: -1}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("an invalid as_of: %v, want invalid_argument", err)
	} else if _, why := reason(err); why != ledger.ReasonInvalidFilter {
		t.Errorf("an invalid as_of: reason %s", why)
	}
}
