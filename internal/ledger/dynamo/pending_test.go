package dynamo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// 100 reversals of 0.5 of one grant of 30 at once, in each race mode, the
// grant maturing among them: exactly 60 go through and take back the
// grant, no more; the grant's reversed amount, conditioned on the amount
// each reversal read, says so; the rest are REVERSAL_EXCEEDS_GRANT.
func TestConcurrentReversalsOfOneGrant(t *testing.T) {
	t.Parallel()
	for _, mode := range raceModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			env := dynamotest.New(t)
			clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
			retry := Retry{Backoff: Backoff{MaxAttempts: 100, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
			var ls []*Ledger
			for range mode.processes {
				ls = append(ls, New(env.Client, Options{Table: env.Ledger, Now: clk.Now, Retry: retry, MaxBatch: mode.maxBatch}))
			}
			mustApply(t, ls[0], mutation(t, ledger.EntryGrant, "u", "base", "100"))
			mustApply(t, ls[0], holdRequest(t, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "30", Effective: clk.Now().Add(time.Hour)}))
			const calls = 100
			var once sync.Once
			_, errs := race(ls, calls, func(i int) ledger.Mutation {
				if i == calls/2 {
					once.Do(func() { clk.Add(time.Hour) }) // the grant matures among them
				}
				return holdRequest(t, ledger.EntryReversal, ledger.Request{RequestID: fmt.Sprint("r", i), GrantRequestID: "g", Amount: "0.5"})
			})
			won := 0
			for i, err := range errs {
				switch {
				case err == nil:
					won++
				case ledger.ReasonOf(err) != ledger.ReasonReversalExceedsGrant:
					t.Errorf("reversal %d: %v", i, err)
				}
			}
			acct := assertAuditClean(t, ls[0], "u")
			g, ok, err := ls[0].entry(context.Background(), "u", 2)
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			if won != 60 || !g.ReversedAmount.Equal(decimal.NewFromInt(30)) || !acct.Balance.Add(acct.Pending).Equal(decimal.NewFromInt(100)) {
				t.Errorf("%d reversals went through, the grant's reversed amount is %s, balance %s and pending %s: want 60, 30, and 100 left in all",
					won, g.ReversedAmount, acct.Balance, acct.Pending)
			}
		})
	}
}

// A user at a bound of 120 pending grants, all maturing at one instant,
// more than one transaction holds: the index of due users names the user
// from that instant (not before), and the sweeper puts every maturation on
// the record, in parts, then finds nothing due.
func TestManyGrantsMaturingTogether(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	counter := &transactionCounter{API: env.Client}
	const grants = 120
	l := New(counter, Options{Table: env.Ledger, Now: clk.Now, MaxPending: grants})
	eff := clk.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for i := range grants {
		wg.Go(func() {
			mustApply(t, l, holdRequest(t, ledger.EntryGrant, ledger.Request{RequestID: fmt.Sprint("g", i), Amount: "1", Effective: eff}))
		})
	}
	wg.Wait()
	if _, err := l.Apply(context.Background(), holdRequest(t, ledger.EntryGrant, ledger.Request{RequestID: "one-more", Amount: "1", Effective: eff})); ledger.ReasonOf(err) != ledger.ReasonTooManyPending {
		t.Fatalf("a grant past the bound: %v, want %s", err, ledger.ReasonTooManyPending)
	}
	due := func(at time.Time) bool {
		found := false
		err := l.DueUsers(context.Background(), expiryShard("u"), at, func(user string) error {
			found = found || user == "u"
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	if due(eff.Add(-time.Microsecond)) || !due(eff) {
		t.Fatalf("the index of due users names u one instant before its grants mature, or not at it")
	}
	clk.Add(time.Hour)
	counter.n.Store(0)
	x, err := l.Expire(context.Background(), "u")
	if err != nil || x.Entry.Type != ledger.EntryMaturation || !x.Balance.Equal(decimal.NewFromInt(grants)) || !x.Pending.IsZero() {
		t.Fatalf("sweep: %+v, %v; want the last MATURATION, balance %d, nothing pending", x, err, grants)
	}
	if n := counter.n.Load(); n < 2 {
		t.Errorf("the sweep took %d transactions; %d maturations take at least 2", n, grants)
	}
	acct := assertAuditClean(t, l, "u")
	if acct.Version != 2*grants || len(acct.PendingLots) != 0 || due(clk.Now()) {
		t.Errorf("account %+v: want version %d, nothing pending, and no longer due", acct, 2*grants)
	}
	if x, err := l.Expire(context.Background(), "u"); err != nil || x.Entry.Version != 0 {
		t.Errorf("a second sweep: %+v, %v; want nothing written", x, err)
	}
}
