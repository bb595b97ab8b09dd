package api_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
)

func TestGrantsExpire(t *testing.T) {
	t.Parallel()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now, Expiry: api.ExpiryPolicy{DefaultTTL: 30 * 24 * time.Hour, Max: 365 * 24 * time.Hour}})
	ctx := context.Background()
	grant := func(r *pb.GrantRequest) (*pb.GrantResponse, error) {
		r.UserId = "u"
		res, err := s.client.Grant(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	inAnHour := clk.Now().Add(time.Hour)
	g1, err := grant(&pb.GrantRequest{RequestId: "g1", Amount: "5", ExpireTime: timestamppb.New(inAnHour)})
	if err != nil || !g1.Entry.ExpireTime.AsTime().Equal(inAnHour) {
		t.Fatalf("grant expiring in an hour: %v, %v", g1, err)
	}
	g2, err := grant(&pb.GrantRequest{RequestId: "g2", Amount: "7", Ttl: durationpb.New(2 * time.Hour)})
	if err != nil || !g2.Entry.ExpireTime.AsTime().Equal(clk.Now().Add(2*time.Hour)) {
		t.Fatalf("grant with a ttl of 2 h: %v, %v", g2, err)
	}
	// A retry of a ttl grant, later, is the same request: its original answer.
	clk.Add(time.Minute)
	again, err := grant(&pb.GrantRequest{RequestId: "g2", Amount: "7", Ttl: durationpb.New(2 * time.Hour)})
	if err != nil || !again.Replayed || !again.Entry.ExpireTime.AsTime().Equal(g2.Entry.ExpireTime.AsTime()) {
		t.Fatalf("the ttl grant again a minute later: %v, %v; want its replay, expiring as first", again, err)
	}
	g3, err := grant(&pb.GrantRequest{RequestId: "g3", Amount: "10"})
	if err != nil || !g3.Entry.ExpireTime.AsTime().Equal(clk.Now().Add(30*24*time.Hour)) {
		t.Fatalf("grant with the program's default of 30 days: %v, %v", g3, err)
	}
	for name, r := range map[string]*pb.GrantRequest{
		"both":            {ExpireTime: timestamppb.New(inAnHour), Ttl: durationpb.New(time.Hour)},
		"in the past":     {ExpireTime: timestamppb.New(clk.Now().Add(-time.Second))},
		"now":             {ExpireTime: timestamppb.New(clk.Now())},
		"beyond the max":  {Ttl: durationpb.New(366 * 24 * time.Hour)},
		"a negative ttl":  {Ttl: durationpb.New(-time.Hour)},
		"an invalid time": {ExpireTime: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}},
	} {
		r.RequestId, r.Amount = "bad", "1"
		if _, err := grant(r); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("grant expiring %s: %v, want invalid_argument", name, err)
		} else if _, why := reason(err); why != ledger.ReasonInvalidExpiry {
			t.Errorf("grant expiring %s: reason %s, want %s", name, why, ledger.ReasonInvalidExpiry)
		}
	}

	bal, err := s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "u"}))
	if err != nil {
		t.Fatal(err)
	}
	if b := bal.Msg; b.Balance != "22" || len(b.Expiring) != 3 || b.Expiring[0].Amount != "5" || !b.Expiring[0].ExpireTime.AsTime().Equal(inAnHour) {
		t.Errorf("balance = %v, want 22 with 5 expiring first, in an hour", b)
	}

	clk.Add(time.Hour) // g1's 5 have expired: not spendable, not in the balance
	bal, err = s.client.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "u"}))
	if err != nil || bal.Msg.Balance != "17" || len(bal.Msg.Expiring) != 2 {
		t.Fatalf("balance an hour later = %v, %v; want 17, two buckets expiring", bal, err)
	}
	p, err := s.purchase("u", "p", "8")
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Entry.Draws; len(d) != 2 || d[0].Amount != "7" || d[1].Amount != "1" || p.Balance != "9" {
		t.Errorf("purchase of 8 = %v, want 7 from the 2 h bucket, then 1 of the 30 days', balance 9", p)
	}
	entries := s.entries(t, "u")
	if len(entries) != 5 || entries[3].Type != pb.EntryType_ENTRY_TYPE_EXPIRATION || entries[3].Amount != "-5" || entries[3].RequestId != "" {
		t.Errorf("entries = %v, want 3 grants, the EXPIRATION of 5, the purchase", entries)
	}
	s.assertSound(t, "u")
}
