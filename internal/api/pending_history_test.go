package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
)

// ListHistory shows a pending grant, its reversal and its maturation with
// the fields ListEntries has for them: pending_change and pending_after,
// the grant's request_id, the effective time.
func TestHistoryShowsPendingGrantsMaturationsAndReversals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now})
	eff := clk.Now().Add(time.Hour)
	if _, err := s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "u", RequestId: "g", Amount: "30", EffectiveDelay: durationpb.New(time.Hour)})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "u", GrantRequestId: "g", Amount: "10", RequestId: "ret", Reason: "returned"})); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	if _, err := s.srv.Store.Expire(ctx, "u"); err != nil { // the sweeper writes the maturation
		t.Fatal(err)
	}
	res, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "u", OldestFirst: true,
		Types: []pb.EntryType{pb.EntryType_ENTRY_TYPE_GRANT, pb.EntryType_ENTRY_TYPE_MATURATION, pb.EntryType_ENTRY_TYPE_REVERSAL}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range res.Msg.Items {
		got = append(got, fmt.Sprint(it.Type, " ", it.Amount, " ", it.BalanceAfter, " ", it.PendingChange, " ", it.PendingAfter, " ",
			it.GrantRequestId, " ", it.EffectiveTime.AsTime().Equal(eff), " ", it.Reason))
	}
	want := []string{
		"ENTRY_TYPE_GRANT 0 0 30 30  true ",
		"ENTRY_TYPE_REVERSAL 0 0 -10 20 g false returned",
		"ENTRY_TYPE_MATURATION 20 20 -20 0 g true ",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history:\n got %q\nwant %q", got, want)
	}
	entries := s.entries(t, "u")
	for i, it := range res.Msg.Items {
		if e := entries[i]; e.PendingChange != it.PendingChange || e.PendingAfter != it.PendingAfter || e.GrantRequestId != it.GrantRequestId || !e.EffectiveTime.AsTime().Equal(it.EffectiveTime.AsTime()) {
			t.Errorf("history item %d %v, its entry %v", i+1, it, e)
		}
	}
}
