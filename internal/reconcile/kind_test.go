package reconcile

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// Liability, breakage and pending per kind: a row for each month and kind.
func TestLiabilityAndBreakagePerKind(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := ledgertest.NewClock(t0)
	store := dynamo.New(f.env.Client, dynamo.Options{Table: f.env.Ledger, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ledgertest.ProgramKinds(t, store, clk)
	apply := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		ledgertest.Must(t, store, typ, r)
	}
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "30"})
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g2", Amount: "10", Kind: "limited", Expire: t0.Add(24 * time.Hour)})
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g3", Amount: "20", Kind: "shop"})
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g4", Amount: "4", Kind: "shop", Effective: time.Date(2027, 1, 5, 0, 0, 0, 0, time.UTC)})
	apply(ledger.EntryPurchase, ledger.Request{UserID: "a", RequestID: "p", Amount: "6", MerchantID: "m1"}) // 6 of the limited points
	clk.Add(48 * time.Hour)
	if _, err := store.Expire(ctx, "a"); err != nil { // the other 4 limited points expire
		t.Fatal(err)
	}
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	rec := New(store, f.history, f.leases)
	rec.now = clk.Now
	rep, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wantLiability := []MonthAmount{{"never", "20", "shop"}, {"never", "30", "standard"}}
	wantBreakage := []MonthAmount{{"2026-11", "4", "limited"}}
	wantPending := []MonthAmount{{"2027-01", "4", "shop"}}
	if !slices.Equal(rep.Liability, wantLiability) || !slices.Equal(rep.Breakage, wantBreakage) || !slices.Equal(rep.Pending, wantPending) {
		t.Errorf("liability %v, breakage %v, pending %v; want %v, %v and %v", rep.Liability, rep.Breakage, rep.Pending, wantLiability, wantBreakage, wantPending)
	}
	if !rep.Clean {
		t.Errorf("findings: %v", rep.Findings)
	}
}
