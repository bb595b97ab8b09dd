package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
)

// errorReason is err's Connect code and the reason of its ErrorInfo.
func errorReason(err error) (connect.Code, string) {
	code, info := servetest.ErrorInfo(err)
	return code, info.GetReason()
}

// Read your writes, on DynamoDB with the projector of a real ledgerd: a
// history read right after a purchase, with the purchase's version as
// min_version, has the purchase, every time.
func TestListHistoryReadsYourWrites(t *testing.T) {
	t.Parallel()
	// The wait is long here so that a busy machine's lag cannot fail the
	// test: what it proves is that no answer misses the purchase.
	p := startLedgerd(t, "LEDGER_HISTORY_WAIT=20s")
	ctx := context.Background()
	client := p.ledgerClient()
	if _, err := client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "reader", Amount: "100", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		id := fmt.Sprintf("p%d", i)
		res, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "reader", Amount: "1", RequestId: id}))
		if err != nil {
			t.Fatal(err)
		}
		v := res.Msg.Entry.Version
		h, err := client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "reader", MinVersion: v, PageSize: 1}))
		if err != nil {
			t.Fatalf("history with min_version %d right after purchase %s: %v", v, id, err)
		}
		if len(h.Msg.Items) != 1 || h.Msg.Items[0].RequestId != id || h.Msg.Items[0].Version != v {
			t.Fatalf("history with min_version %d right after purchase %s: newest %v, want the purchase", v, id, h.Msg.Items)
		}
	}
}

// With no projector, the history never reaches the purchase: after the
// wait, unavailable, HISTORY_BEHIND; a version past the ledger's is
// refused at once.
func TestListHistoryBehindWithoutProjector(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t, "LEDGER_PROJECTOR=false", "LEDGER_HISTORY_WAIT=300ms")
	ctx := context.Background()
	client := p.ledgerClient()
	if _, err := client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "waiter", Amount: "10", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}
	res, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "waiter", Amount: "1", RequestId: "p"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "waiter", MinVersion: res.Msg.Entry.Version}))
	if code, why := errorReason(err); code != connect.CodeUnavailable || why != ledger.ReasonHistoryBehind {
		t.Fatalf("history with no projector: %v, want unavailable/%s", err, ledger.ReasonHistoryBehind)
	}
	if !strings.Contains(err.Error(), "reached version 0, not min_version 2") {
		t.Errorf("message %q does not say the version reached and the one asked", err)
	}
	_, err = client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "waiter", MinVersion: res.Msg.Entry.Version + 1}))
	if code, why := errorReason(err); code != connect.CodeFailedPrecondition || why != ledger.ReasonMinVersionAhead {
		t.Errorf("min_version past the ledger: %v, want failed_precondition/%s", err, ledger.ReasonMinVersionAhead)
	}
	// Without min_version, the history as it is: empty.
	h, err := client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "waiter"}))
	if err != nil || len(h.Msg.Items) != 0 {
		t.Errorf("history with no projector, without min_version: %v, %v; want none, at once", h, err)
	}
}
