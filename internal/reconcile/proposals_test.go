package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

func TestTheProposedAdjustmentMakesTheLedgerAgree(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "100"})
	f.set(t, f.env.Ledger, "u", "A", "balance", num("150")) // inflated behind the ledger's back
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "p", Amount: "120"})
	if err := f.history.Rebuild(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	rep := f.run(t, Options{User: "u"})
	if len(rep.Proposed) != 1 {
		t.Fatalf("proposals = %+v, want one", rep.Proposed)
	}
	p := rep.Proposed[0]
	if p.Amount != "50" || p.ExpectedBalance != "30" {
		t.Fatalf("proposal = %+v, want 50 explaining a balance of 30", p)
	}
	f.apply(t, ledger.EntryAdjustment, ledger.Request{UserID: p.UserID, RequestID: p.RequestID, Amount: p.Amount,
		Debit: p.Debit, Reason: p.Reason, ExplainBalance: true, ExpectedBalance: p.ExpectedBalance})
	if err := f.history.Rebuild(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	rep = f.run(t, Options{User: "u"})
	if !rep.Clean || len(rep.Findings) != 0 || len(rep.Proposed) != 0 {
		t.Fatalf("after the adjustment: %+v, want clean", rep)
	}
	acct, err := f.store.Balance(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance.String() != "30" || acct.Version != 3 {
		t.Errorf("account = balance %s version %d; the adjustment must not move the balance", acct.Balance, acct.Version)
	}
}

// Two runs propose the same fix before anyone applies it; applying both
// must not explain the balance twice (the entries would then over-explain it
// for good: entries are never edited).
func TestAProposalFromTwoRunsAppliesOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "100"})
	f.set(t, f.env.Ledger, "u", "A", "balance", num("107"))
	if err := f.history.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	first := f.run(t, Options{User: "u"})
	later := time.Now().Add(time.Minute)
	f.rec.now = func() time.Time { return later }
	second := f.run(t, Options{User: "u"})
	var errs []error
	for _, rep := range []Report{first, second} {
		if len(rep.Proposed) != 1 {
			t.Fatalf("proposals: %+v, want one", rep.Proposed)
		}
		p := rep.Proposed[0]
		m, err := ledger.NewMutation(ledger.EntryAdjustment, ledger.Request{UserID: p.UserID, RequestID: p.RequestID, Amount: p.Amount,
			Debit: p.Debit, Reason: p.Reason, ExplainBalance: true, ExpectedBalance: p.ExpectedBalance}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.store.Apply(ctx, m)
		errs = append(errs, err)
	}
	if errs[0] != nil || ledger.ReasonOf(errs[1]) != ledger.ReasonRequestIDReused {
		t.Errorf("applying the first run's proposal: %v; the second's: %v, want ALREADY_EXISTS", errs[0], errs[1])
	}
	if err := f.history.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	f.rec.now = time.Now
	if rep := f.run(t, Options{User: "u"}); !rep.Clean {
		t.Errorf("after applying both proposals: %v", rep.Findings)
	}
}

// A proposal refused because the balance moved again (a second drift, no
// new version) stays refused; the next run proposes for the new balance
// under a request id of its own, and that one applies.
func TestAProposalForABalanceThatMovedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "100"})
	if err := f.history.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	adjust := func(p Adjustment) error {
		m, err := ledger.NewMutation(ledger.EntryAdjustment, ledger.Request{UserID: p.UserID, RequestID: p.RequestID, Amount: p.Amount,
			Debit: p.Debit, Reason: p.Reason, ExplainBalance: true, ExpectedBalance: p.ExpectedBalance}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.store.Apply(ctx, m)
		return err
	}
	f.set(t, f.env.Ledger, "u", "A", "balance", num("107"))
	first := f.run(t, Options{User: "u"})
	f.set(t, f.env.Ledger, "u", "A", "balance", num("110"))
	if len(first.Proposed) != 1 {
		t.Fatalf("proposals: %+v, want one", first.Proposed)
	}
	if err := adjust(first.Proposed[0]); ledger.ReasonOf(err) != ledger.ReasonBalanceMoved {
		t.Fatalf("the first proposal after the balance moved: %v, want %s", err, ledger.ReasonBalanceMoved)
	}
	f.rec.now = func() time.Time { return time.Now().Add(time.Minute) }
	second := f.run(t, Options{User: "u"})
	if len(second.Proposed) != 1 || second.Proposed[0].RequestID == first.Proposed[0].RequestID {
		t.Fatalf("second run's proposals: %+v, want one under another request id than %s", second.Proposed, first.Proposed[0].RequestID)
	}
	if err := adjust(second.Proposed[0]); err != nil {
		t.Fatalf("the second run's proposal: %v", err)
	}
	if err := f.history.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	f.rec.now = time.Now
	if rep := f.run(t, Options{User: "u"}); !rep.Clean {
		t.Errorf("after the second proposal: %v", rep.Findings)
	}
}
