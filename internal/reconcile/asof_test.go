package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// TestLiabilityAsOf: a reconciliation run at the end of March reports a
// liability, breakage and pending; one run in May as of that time reports
// the same, although April expired points, spent, granted, matured and
// swept since.
func TestLiabilityAsOf(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := ledgertest.NewClock(march)
	store := dynamo.New(f.env.Client, dynamo.Options{Table: f.env.Ledger, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rec := New(store, f.history, f.leases)
	rec.now = clk.Now
	apply := func(typ ledger.EntryType, r ledger.Request) { t.Helper(); ledgertest.Must(t, store, typ, r) }
	day := 24 * time.Hour
	for i, user := range []string{"a", "b", "c"} {
		apply(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: "g1", Amount: fmt.Sprint(10 * (i + 1)), Expire: march.Add(10 * day)})
		apply(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: "g2", Amount: "7", Expire: march.Add(45 * day)})
		apply(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: "g3", Amount: "3"})
		apply(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: "g4", Amount: "4", Effective: march.Add(40 * day)})
	}
	clk.Add(5 * day)
	apply(ledger.EntryPurchase, ledger.Request{UserID: "a", RequestID: "p1", Amount: "4"})
	clk.Add(10 * day) // a's bucket of 10 expired on 11 March: the sweeper writes a's EXPIRATION, not b's or c's
	if _, err := store.Expire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	endOfMarch := time.Date(2026, 3, 31, 23, 59, 59, 0, time.UTC)
	clk.Add(endOfMarch.Sub(clk.Now()))
	then, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: 60 * day})
	if err != nil {
		t.Fatal(err)
	}
	if len(then.Liability) == 0 || len(then.Breakage) == 0 || len(then.Pending) == 0 {
		t.Fatalf("at the end of March: liability %v, breakage %v, pending %v; the test wants some of each", then.Liability, then.Breakage, then.Pending)
	}

	// April and May: more grants and purchases, expiries and maturities on
	// the record.
	clk.Add(2 * time.Second)
	apply(ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g5", Amount: "50", Expire: march.Add(80 * day)})
	apply(ledger.EntryPurchase, ledger.Request{UserID: "c", RequestID: "p1", Amount: "5"})
	clk.Add(30 * day)
	for _, user := range []string{"a", "b", "c"} {
		if _, err := store.Expire(ctx, user); err != nil {
			t.Fatal(err)
		}
	}
	apply(ledger.EntryGrant, ledger.Request{UserID: "d", RequestID: "g1", Amount: "9"})
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	now, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: 60 * day})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(now.Liability, then.Liability) {
		t.Fatalf("the liability did not move since March (%v): the test proves nothing", now.Liability)
	}
	asOf, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: 60 * day, AsOf: endOfMarch})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asOf.Liability, then.Liability) || !slices.Equal(asOf.Breakage, then.Breakage) || !slices.Equal(asOf.Pending, then.Pending) {
		t.Errorf("as of the end of March, run in May: liability %v, breakage %v, pending %v;\nrun then: %v, %v, %v",
			asOf.Liability, asOf.Breakage, asOf.Pending, then.Liability, then.Breakage, then.Pending)
	}
	if !asOf.AsOf.Equal(endOfMarch) || !then.AsOf.IsZero() {
		t.Errorf("as_of of the reports: %s and %s", asOf.AsOf, then.AsOf)
	}
}
