package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// KindStore is a store that keeps point kinds beside the ledgers.
type KindStore interface {
	ledger.Store
	ledger.PointKinds
}

// KindContract runs the point kinds' suite every store with kinds must
// pass. newStore returns an empty store whose clock is now.
func KindContract(t *testing.T, newStore func(t *testing.T, now func() time.Time) KindStore) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, s KindStore, clk *Clock)
	}{
		{"a kind is created once and changed by its updates", kindsCreatedOnce},
		{"a credit of an unknown kind is refused for good", unknownKindRefused},
		{"purchases spend eligible kinds in spending order", kindsSpentInOrder},
		{"refunds of multi-kind purchases give back what they drew", multiKindRefunds},
		{"concurrent purchases across merchants draw only eligible points, once", kindsConcurrently},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := NewClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
			c.test(t, newStore(t, clk.Now), clk)
		})
	}
}

// CreateKind creates kind id with priority, spendable only at merchants
// (none: anywhere) and never in excluded categories.
func CreateKind(tb testing.TB, s ledger.PointKinds, id string, priority int32, merchants, excluded []string) ledger.PointKind {
	tb.Helper()
	c, err := ledger.NewKindChange(ledger.KindRequest{RequestID: "create-" + id, KindID: id, Priority: &priority, Merchants: merchants, ExcludedCategories: excluded})
	if err != nil {
		tb.Fatal(err)
	}
	k, _, err := s.CreatePointKind(context.Background(), c)
	if err != nil {
		tb.Fatalf("create kind %s: %v", id, err)
	}
	return k
}

// ProgramKinds creates a program shaped like a Japanese one: "limited"
// (priority 10, not for exchange), "shop" (priority 20, at m1 and m2
// only), and standard; then moves clk past ledger.MaxKindRefresh, so that
// the audit checks the draws of the spends that follow by those rules.
func ProgramKinds(tb testing.TB, s ledger.PointKinds, clk *Clock) {
	tb.Helper()
	CreateKind(tb, s, "limited", 10, nil, []string{"exchange"})
	CreateKind(tb, s, "shop", 20, []string{"m1", "m2"}, nil)
	if clk != nil {
		clk.Add(2 * ledger.MaxKindRefresh)
	}
}

func kindsCreatedOnce(t *testing.T, s KindStore, clk *Clock) {
	ctx := context.Background()
	p := int32(10)
	c, err := ledger.NewKindChange(ledger.KindRequest{RequestID: "c1", KindID: "limited", Priority: &p, ExcludedCategories: []string{"exchange"}})
	if err != nil {
		t.Fatal(err)
	}
	k, replayed, err := s.CreatePointKind(ctx, c)
	if err != nil || replayed || k.ID != "limited" || k.Priority != 10 || k.CreateTime.IsZero() {
		t.Fatalf("create: %+v, %v, %v", k, replayed, err)
	}
	if _, replayed, err := s.CreatePointKind(ctx, c); err != nil || !replayed {
		t.Errorf("the same creation again: %v, replayed %v", err, replayed)
	}
	other, _ := ledger.NewKindChange(ledger.KindRequest{RequestID: "c2", KindID: "limited"})
	if _, _, err := s.CreatePointKind(ctx, other); ledger.ReasonOf(err) != ledger.ReasonKindExists {
		t.Errorf("a second creation of limited: %v, want %s", err, ledger.ReasonKindExists)
	}
	reused, _ := ledger.NewKindChange(ledger.KindRequest{RequestID: "c1", KindID: "limited", Description: "other"})
	if _, _, err := s.CreatePointKind(ctx, reused); ledger.ReasonOf(err) != ledger.ReasonRequestIDReused {
		t.Errorf("another creation under c1: %v, want %s", err, ledger.ReasonRequestIDReused)
	}
	u, _ := ledger.NewKindChange(ledger.KindRequest{RequestID: "u1", KindID: "limited", Description: "campaign", Merchants: []string{"m1"}})
	k, replayed, err = s.UpdatePointKind(ctx, u)
	if err != nil || replayed || k.Priority != 50 || len(k.Merchants) != 1 || len(k.ExcludedCategories) != 0 || k.Description != "campaign" {
		t.Errorf("update: %+v, %v, %v; want priority 50, merchants [m1], no excluded categories", k, replayed, err)
	}
	if _, replayed, err := s.UpdatePointKind(ctx, u); err != nil || !replayed {
		t.Errorf("the same update again: %v, replayed %v", err, replayed)
	}
	none, _ := ledger.NewKindChange(ledger.KindRequest{RequestID: "u2", KindID: "nosuch"})
	if _, _, err := s.UpdatePointKind(ctx, none); ledger.ReasonOf(err) != ledger.ReasonKindNotFound {
		t.Errorf("update of none: %v, want %s", err, ledger.ReasonKindNotFound)
	}
	got, err := s.GetPointKind(ctx, "limited")
	if err != nil || got.Description != "campaign" || got.UpdateTime.Before(got.CreateTime) {
		t.Errorf("get: %+v, %v", got, err)
	}
	if _, err := s.GetPointKind(ctx, "nosuch"); ledger.ReasonOf(err) != ledger.ReasonKindNotFound {
		t.Errorf("get of none: %v", err)
	}
	CreateKind(t, s, "a-first", 50, nil, nil)
	list, err := s.ListPointKinds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range list {
		ids = append(ids, ledger.KindName(k.ID))
	}
	if strings.Join(ids, " ") != "standard a-first limited" {
		t.Errorf("list: %v, want standard a-first limited", ids)
	}
	if res := Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "1", Kind: "a-first"}); res.Entry.Kind != "a-first" {
		t.Errorf("a grant of a-first: entry kind %q", res.Entry.Kind)
	}
	Sound(t, s, "u")
}

func unknownKindRefused(t *testing.T, s KindStore, clk *Clock) {
	for range 2 {
		_, err := apply(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "5", Kind: "nosuch"})
		if ledger.ReasonOf(err) != ledger.ReasonKindNotFound {
			t.Fatalf("grant of an unknown kind: %v", err)
		}
	}
	// Creating the kind afterwards does not change the recorded refusal.
	CreateKind(t, s, "nosuch", 50, nil, nil)
	_, err := apply(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "5", Kind: "nosuch"})
	if e, ok := ledger.AsError(err); !ok || e.Reason != ledger.ReasonKindNotFound || !e.Replayed {
		t.Errorf("the refused grant again, once the kind exists: %v, want the recorded KIND_NOT_FOUND", err)
	}
	if res := Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "5", Kind: "nosuch"}); res.Entry.Kind != "nosuch" {
		t.Errorf("grant of the new kind: entry kind %q", res.Entry.Kind)
	}
	Sound(t, s, "u")
}

// drawText is an entry's draws as "kind:amount ...".
func drawText(ds []ledger.Draw) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = ledger.KindName(d.Kind) + ":" + d.Amount.String()
	}
	return strings.Join(parts, " ")
}

func kindsSpentInOrder(t *testing.T, s KindStore, clk *Clock) {
	ProgramKinds(t, s, clk)
	expire := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "40"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "20", Kind: "shop"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g3", Amount: "10", Kind: "limited", Expire: expire})
	p := Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p1", Amount: "15", MerchantID: "m9", Category: "food"})
	if got := drawText(p.Entry.Draws); got != "limited:10 standard:5" || p.Entry.MerchantID != "m9" || p.Entry.Category != "food" {
		t.Errorf("purchase at m9: %s at %q in %q", got, p.Entry.MerchantID, p.Entry.Category)
	}
	e := refusedKind(t, s, ledger.Request{RequestID: "p2", Amount: "36"}, "35")
	if !strings.Contains(e.Message, "no merchant") {
		t.Errorf("the refusal %q does not say where", e.Message)
	}
	p = Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p3", Amount: "30", MerchantID: "m2", Category: "exchange"})
	if got := drawText(p.Entry.Draws); got != "shop:20 standard:10" {
		t.Errorf("purchase at m2: %s", got)
	}
	// A hold draws as a purchase does; its capture spends what it drew and
	// records where.
	h := Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "5", MerchantID: "m1", Expire: expire})
	c := Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1", Amount: "3"})
	if drawText(h.Hold.Draws) != "standard:5" || drawText(c.Entry.Draws) != "standard:3" || c.Entry.MerchantID != "m1" {
		t.Errorf("hold %s, capture %s at %q", drawText(h.Hold.Draws), drawText(c.Entry.Draws), c.Entry.MerchantID)
	}
	acct := Sound(t, s, "u")
	if !acct.Balance.Equal(amount("22")) {
		t.Errorf("balance %s, want 22", acct.Balance)
	}
}

// refusedKind applies a purchase r that must be refused INSUFFICIENT_BALANCE
// with spendable metadata.
func refusedKind(t *testing.T, s KindStore, r ledger.Request, spendable string) *ledger.Error {
	t.Helper()
	_, err := apply(t, s, ledger.EntryPurchase, r)
	e, ok := ledger.AsError(err)
	if !ok || e.Reason != ledger.ReasonInsufficientBalance || e.Metadata[ledger.MetadataSpendable] != spendable {
		t.Fatalf("purchase %+v: %v, want INSUFFICIENT_BALANCE with spendable %s", r, err, spendable)
	}
	_, err = apply(t, s, ledger.EntryPurchase, r)
	if again, ok := ledger.AsError(err); !ok || !again.Replayed || again.Metadata[ledger.MetadataSpendable] != spendable {
		t.Errorf("the refusal again: %v, want it replayed with spendable %s", err, spendable)
	}
	return e
}

func multiKindRefunds(t *testing.T, s KindStore, clk *Clock) {
	ProgramKinds(t, s, clk)
	expire := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "40"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "20", Kind: "shop"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g3", Amount: "10", Kind: "limited", Expire: expire})
	p := Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "50", MerchantID: "m1"})
	if got := drawText(p.Entry.Draws); got != "limited:10 shop:20 standard:20" {
		t.Fatalf("purchase draws %s", got)
	}
	r := Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r1", PurchaseRequestID: "p", Amount: "25"})
	if got := drawText(r.Entry.Draws); got != "standard:20 shop:5" {
		t.Errorf("first refund gives back %s, want standard:20 shop:5", got)
	}
	r = Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r2", PurchaseRequestID: "p", Amount: "25"})
	if got := drawText(r.Entry.Draws); got != "shop:15 limited:10" {
		t.Errorf("second refund gives back %s, want shop:15 limited:10", got)
	}
	acct := Sound(t, s, "u")
	if got := kindText(acct, clk.Now()); got != "limited:10 shop:20 standard:40" {
		t.Errorf("after the refunds: %s, want every kind back as granted", got)
	}
}

func kindText(a ledger.Account, at time.Time) string {
	var parts []string
	for _, kb := range a.KindBalances(at, nil) {
		parts = append(parts, ledger.KindName(kb.Kind)+":"+kb.Balance.String())
	}
	return strings.Join(parts, " ")
}

// kindsConcurrently: purchases at random merchants and categories at once
// on one user holding four kinds; after them, the audit (with the kinds)
// finds no ineligible draw and each kind's buckets the fold of its draws,
// no kind spent more than was granted of it, and every point spent by
// exactly one acknowledged purchase.
func kindsConcurrently(t *testing.T, s KindStore, clk *Clock) {
	CreateKind(t, s, "shop2", 20, []string{"m3"}, nil)
	ProgramKinds(t, s, clk)
	granted := map[string]decimal.Decimal{"": amount("200"), "shop": amount("100"), "shop2": amount("100"), "limited": amount("100")}
	for kind, a := range granted {
		Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g-" + ledger.KindName(kind), Amount: a.String(), Kind: kind})
	}
	merchants := []string{"", "m1", "m2", "m3", "m9"}
	categories := []string{"", "food", "exchange"}
	var mu sync.Mutex
	spent := decimal.Zero
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 80 {
		rnd := rand.New(rand.NewPCG(uint64(i), 7))
		r := ledger.Request{RequestID: fmt.Sprint("p", i), Amount: "10", MerchantID: merchants[rnd.IntN(len(merchants))], Category: categories[rnd.IntN(len(categories))]}
		wg.Go(func() {
			<-start
			_, err := apply(t, s, ledger.EntryPurchase, r)
			switch {
			case err == nil:
				mu.Lock()
				spent = spent.Add(amount("10"))
				mu.Unlock()
			case ledger.ReasonOf(err) == ledger.ReasonInsufficientBalance:
			default:
				t.Errorf("purchase %+v: %v", r, err)
			}
		})
	}
	close(start)
	wg.Wait()
	acct := Sound(t, s, "u") // the audit, with the store's kinds: no ineligible draw, buckets the fold
	if want := amount("500").Sub(spent); !acct.Balance.Equal(want) {
		t.Errorf("balance %s after %s acknowledged, want %s", acct.Balance, spent, want)
	}
	entries, err := s.EntriesAfter(context.Background(), "u", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	drawn := map[string]decimal.Decimal{}
	total := decimal.Zero
	for _, e := range entries {
		if e.Type != ledger.EntryPurchase {
			continue
		}
		for _, d := range e.Draws {
			drawn[d.Kind] = drawn[d.Kind].Add(d.Amount)
			total = total.Add(d.Amount)
		}
	}
	for kind, d := range drawn {
		if d.GreaterThan(granted[kind]) {
			t.Errorf("kind %s: %s drawn of %s granted", ledger.KindName(kind), d, granted[kind])
		}
	}
	if !total.Equal(spent) {
		t.Errorf("purchases drew %s in all, %s acknowledged", total, spent)
	}
}
