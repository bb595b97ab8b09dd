package ledgertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The contract's cases of pending grants and reversals (see Contract).

// pending checks the user's account: its balance and what it has pending,
// as the store keeps them.
func pending(t *testing.T, s ledger.Store, balance, pending string) ledger.Account {
	t.Helper()
	acct := Sound(t, s, "u")
	if !acct.Balance.Equal(amount(balance)) || !acct.Pending.Equal(amount(pending)) || !ledger.PendingTotal(acct.PendingLots).Equal(acct.Pending) {
		t.Fatalf("balance %s, pending %s (lots %+v); want %s and %s", acct.Balance, acct.Pending, acct.PendingLots, balance, pending)
	}
	return acct
}

func entryTypes(t *testing.T, s ledger.Store) string {
	t.Helper()
	es, err := s.EntriesAfter(context.Background(), "u", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]ledger.EntryType, len(es))
	for i, e := range es {
		out[i] = e.Type
	}
	return fmt.Sprint(out)
}

func pendingMaturesBeforeMutation(t *testing.T, s ledger.Store, clk *Clock) {
	eff := clk.Now().Add(time.Hour)
	g := Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: eff, Expire: eff.Add(time.Hour)})
	if e := g.Entry; !e.Amount.IsZero() || !e.PendingChange.Equal(amount("10")) || !e.EffectiveTime.Equal(eff) || !g.Balance.IsZero() || !g.Pending.Equal(amount("10")) {
		t.Fatalf("pending grant = %+v", g)
	}
	again := Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: eff, Expire: eff.Add(time.Hour)})
	if !again.Replayed || again.Entry.ID != g.Entry.ID || !again.Pending.Equal(amount("10")) {
		t.Errorf("the grant again = %+v", again)
	}
	pending(t, s, "0", "10")
	clk.Add(time.Hour - time.Microsecond)
	refused(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p1", Amount: "1"}, ledger.ReasonInsufficientBalance)
	refused(t, s, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "1", Expire: eff.Add(time.Minute)}, ledger.ReasonInsufficientBalance)
	clk.Add(time.Microsecond)
	p := Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p2", Amount: "4"})
	if !p.Balance.Equal(amount("6")) || !p.Pending.IsZero() || p.Entry.Version != 3 {
		t.Errorf("purchase at the effective time = %+v", p)
	}
	if got := entryTypes(t, s); got != "[GRANT MATURATION PURCHASE]" {
		t.Errorf("entries %s", got)
	}
	acct := pending(t, s, "6", "0")
	if len(acct.Buckets) != 1 || !acct.Buckets[0].Expire.Equal(eff.Add(time.Hour)) {
		t.Errorf("buckets %+v, want the grant's expiry", acct.Buckets)
	}
}

func sweeperMatures(t *testing.T, s ledger.Store, clk *Clock) {
	ctx := context.Background()
	eff := clk.Now().Add(time.Hour)
	for i := range 3 {
		Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: fmt.Sprint("g", i), Amount: "2", Effective: eff})
	}
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "later", Amount: "5", Effective: eff.Add(time.Hour)})
	if res, err := s.Expire(ctx, "u"); err != nil || res.Entry.Version != 0 {
		t.Fatalf("a sweep before anything is due: %+v, %v", res, err)
	}
	clk.Add(time.Hour)
	res, err := s.Expire(ctx, "u")
	if err != nil || res.Entry.Type != ledger.EntryMaturation || !res.Balance.Equal(amount("6")) || !res.Pending.Equal(amount("5")) {
		t.Fatalf("the sweep at maturity: %+v, %v", res, err)
	}
	if got := entryTypes(t, s); got != "[GRANT GRANT GRANT GRANT MATURATION MATURATION MATURATION]" {
		t.Errorf("entries %s", got)
	}
	if acct := pending(t, s, "6", "5"); !acct.NextDue().Equal(eff.Add(time.Hour)) {
		t.Errorf("next due %s", acct.NextDue())
	}
}

func reversalPendingThenSpendable(t *testing.T, s ledger.Store, clk *Clock) {
	eff := clk.Now().Add(time.Hour)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "base", Amount: "20"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: eff})
	r := Must(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r1", GrantRequestID: "g", Amount: "4", Reason: "order returned"})
	if e := r.Entry; e.Type != ledger.EntryReversal || !e.Amount.IsZero() || !e.PendingChange.Equal(amount("-4")) || e.GrantRequestID != "g" || e.Reason != "order returned" ||
		!r.Pending.Equal(amount("6")) || !r.Balance.Equal(amount("20")) {
		t.Errorf("reversal of pending points = %+v", r)
	}
	clk.Add(time.Hour)
	r = Must(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r2", GrantRequestID: "g", Amount: "5"})
	if e := r.Entry; !e.Amount.Equal(amount("-5")) || !e.PendingChange.IsZero() || len(e.Draws) == 0 || !r.Balance.Equal(amount("21")) {
		t.Errorf("reversal of matured points = %+v", r)
	}
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "21"})
	refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r3", GrantRequestID: "g"}, ledger.ReasonInsufficientBalance)
	refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r4", GrantRequestID: "g", Amount: "2"}, ledger.ReasonReversalExceedsGrant)
	if got := entryTypes(t, s); got != "[GRANT GRANT REVERSAL MATURATION REVERSAL PURCHASE]" {
		t.Errorf("entries %s", got)
	}
	es, err := s.EntriesAfter(context.Background(), "u", 1, 1)
	if err != nil || len(es) != 1 || !es[0].ReversedAmount.Equal(amount("9")) {
		t.Errorf("the grant after its reversals: %+v, %v; want 9 reversed", es, err)
	}
	pending(t, s, "0", "0")
}

func reversalOnceAndFinal(t *testing.T, s ledger.Store, clk *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: clk.Now().Add(time.Hour)})
	refused(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "0.01"}, ledger.ReasonInsufficientBalance) // pending: not spendable
	first := Must(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r", GrantRequestID: "g"})
	again := Must(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r", GrantRequestID: "g"})
	if !again.Replayed || again.Entry.ID != first.Entry.ID || !again.Pending.IsZero() {
		t.Errorf("the reversal again = %+v, want %+v replayed", again, first)
	}
	refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "r", GrantRequestID: "g", Amount: "1"}, ledger.ReasonRequestIDReused)
	e := refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "nf", GrantRequestID: "later"}, ledger.ReasonGrantNotFound)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "later", Amount: "1"})
	if e2 := refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "nf", GrantRequestID: "later"}, ledger.ReasonGrantNotFound); !e2.Replayed || e2.Message != e.Message {
		t.Errorf("the refused reversal again: %+v, want %+v replayed", e2, e)
	}
	refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "over", GrantRequestID: "g", Amount: "0.01"}, ledger.ReasonReversalExceedsGrant)
	if e := refused(t, s, ledger.EntryReversal, ledger.Request{RequestID: "over", GrantRequestID: "g", Amount: "0.01"}, ledger.ReasonReversalExceedsGrant); !e.Replayed {
		t.Errorf("REVERSAL_EXCEEDS_GRANT again: %+v, want it replayed", e)
	}
	pending(t, s, "1", "0")
}

// Concurrent reversals of one grant, half of it pending when they start
// and the rest spendable: they take back exactly the grant, no more.
func reversalsConcurrently(t *testing.T, s ledger.Store, clk *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "base", Amount: "100"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: clk.Now().Add(time.Hour)})
	var won atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if i == 20 {
				clk.Add(time.Hour) // the grant matures among them
			}
			_, err := apply(t, s, ledger.EntryReversal, ledger.Request{RequestID: fmt.Sprint("r", i), GrantRequestID: "g", Amount: "0.5"})
			switch {
			case err == nil:
				won.Add(1)
			case ledger.ReasonOf(err) != ledger.ReasonReversalExceedsGrant:
				t.Errorf("reversal %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	acct := Sound(t, s, "u")
	if won.Load() != 20 || !acct.Balance.Add(acct.Pending).Equal(amount("100")) {
		t.Errorf("%d reversals of 0.5 of a grant of 10 went through; balance %s, pending %s: want 20, and 100 left in all", won.Load(), acct.Balance, acct.Pending)
	}
}
