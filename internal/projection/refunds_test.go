package projection

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// Refunds reach their purchase's history item through the refund entries:
// two refunds of one purchase applied together make one update of it.
func TestRefundsOfOnePurchaseAppliedTogether(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	apply := func(typ ledger.EntryType, id, amount, purchase string) { f.apply(t, typ, "u1", id, amount, purchase) }
	apply(ledger.EntryGrant, "g", "100", "")
	apply(ledger.EntryPurchase, "p", "30", "")
	apply(ledger.EntryRefund, "r1", "5", "p")
	apply(ledger.EntryRefund, "r2", "7", "p")
	entries, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[:2]); err != nil { // the purchase, as the stream gave it: refunded 0
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[2:]); err != nil { // both refunds in one batch
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries); err != nil { // all again: nothing changes
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// A grant's reversed amount in history is the sum of its reversals applied
// so far, as a purchase's refunded amount is: a pending grant enters history
// at reversed 0 whether it comes from the stream or from the ledger (which
// has counted later reversals on it), each reversal adds to it once, in the
// batch of its grant or after it, of pending points or of matured ones; the
// maturation between them and the state's pending are the ledger's.
func TestReversalsOfAPendingGrantAddToItsReversedAmount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := t0
	store := dynamo.New(f.env.Client, dynamo.Options{Table: f.env.Ledger, Logger: quiet, Now: func() time.Time { return clk }})
	apply := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		r.UserID = "u1"
		ledgertest.Must(t, store, typ, r)
	}
	apply(ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: t0.Add(time.Hour)}) // 1: pending
	apply(ledger.EntryReversal, ledger.Request{RequestID: "rv1", Amount: "3", GrantRequestID: "g"})      // 2: of pending points
	clk = t0.Add(2 * time.Hour)
	apply(ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "2"})                        // 3: MATURATION of 7, 4: the purchase
	apply(ledger.EntryReversal, ledger.Request{RequestID: "rv2", Amount: "4", GrantRequestID: "g"}) // 5: of matured points
	entries, err := store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 || entries[2].Type != ledger.EntryMaturation || !entries[0].ReversedAmount.Equal(decimal.NewFromInt(7)) {
		t.Fatalf("ledger entries %+v: want the grant (reversed 7), a reversal, its maturation, the purchase and a reversal", entries)
	}
	if err := f.history.Apply(ctx, entries[:2]); err != nil { // the grant and a reversal in one batch
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[2:]); err != nil { // the other reversal updates the grant's item
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries); err != nil { // all again: nothing changes
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
	matured, _, err := f.history.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: 10}, Types: []ledger.EntryType{ledger.EntryMaturation, ledger.EntryReversal}, OldestFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(matured) != 3 || matured[1].GrantRequestID != "g" || !matured[1].PendingChange.Equal(decimal.NewFromInt(-7)) {
		t.Errorf("history of maturations and reversals %+v: want the reversal, the maturation of 7 and the reversal", matured)
	}

	// From the ledger in one go (a gap filled, a rebuild): the grant as the
	// ledger has it now, reversed 7, counts each reversal once.
	other := NewHistory(f.env.Client, f.env.History, store, nil)
	if _, err := f.env.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &f.env.History,
		Key: map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: dynamo.PartitionKey("u1")}, "SK": &ddbtypes.AttributeValueMemberS{Value: stateSK}}}); err != nil {
		t.Fatal(err)
	}
	if err := other.Apply(ctx, entries[1:]); err != nil { // starts with a gap: the grant is read from the ledger
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
	if err := other.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// A capture is refunded as a purchase is: read from the ledger after its
// refund (as a gap is filled), it enters history at refunded 0, and the
// refund adds to it once.
func TestARefundedCaptureReadFromTheLedger(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, r := range []struct {
		typ ledger.EntryType
		req ledger.Request
	}{
		{ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"}},
		{ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "30", Expire: time.Now().Add(time.Hour)}},
		{ledger.EntryCapture, ledger.Request{RequestID: "c", HoldRequestID: "h"}},
		{ledger.EntryRefund, ledger.Request{RequestID: "r", Amount: "12", PurchaseRequestID: "c"}},
	} {
		r.req.UserID = "u1"
		m, err := ledger.NewMutation(r.typ, r.req, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries); err != nil { // the capture as the ledger has it: refunded 12
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// A refund whose purchase is missing from history (a corrupted projection)
// fails with an error that says so, instead of retrying as a race.
func TestARefundOfAPurchaseMissingFromHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g", "10", "")
	f.apply(t, ledger.EntryPurchase, "u1", "p", "5", "")
	f.apply(t, ledger.EntryRefund, "u1", "r", "1", "p")
	entries, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &f.env.History, Key: map[string]ddbtypes.AttributeValue{
		"PK": ddbattr.S(dynamo.PartitionKey("u1")), "SK": ddbattr.S(historySK(2)),
	}}); err != nil {
		t.Fatal(err)
	}
	err = f.history.Apply(ctx, entries[2:])
	if err == nil || !strings.Contains(err.Error(), "rebuild it") {
		t.Fatalf("applying a refund of a purchase missing from history: %v, want an error that says to rebuild", err)
	}
	if err := f.history.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}
