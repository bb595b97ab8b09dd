package ledgertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The contract's cases of one sweep (Store.Expire) that writes several
// kinds of entry at once: maturations, releases of expired holds and the
// expiration of several buckets, in one call, and the mutations after it.
// A store that wrote two operations on one item in such a transaction
// (DynamoDB refuses them) would fail here, not only in a test that sweeps
// one thing at a time.

// sweepOnce calls Expire once and checks that it wrote the entries of
// types want, in order, as its user's last entries, and answers the
// account after them.
func sweepOnce(t *testing.T, s ledger.Store, want ...ledger.EntryType) ledger.Result {
	t.Helper()
	ctx := context.Background()
	before, err := s.Balance(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Expire(ctx, "u")
	if err != nil {
		t.Fatalf("one sweep: %v", err)
	}
	es, err := s.EntriesAfter(ctx, "u", before.Version, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]ledger.EntryType, len(es))
	for i, e := range es {
		got[i] = e.Type
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || x.Entry.Type != want[len(want)-1] || x.Entry.Version != before.Version+int64(len(want)) {
		t.Fatalf("one sweep wrote %v and answered %+v; want %v, answered with the last", got, x, want)
	}
	acct := Sound(t, s, "u")
	if !x.Balance.Equal(acct.Balance) || !x.Held.Equal(acct.Held) || !x.Pending.Equal(acct.Pending) {
		t.Errorf("the sweep answered balance %s, held %s, pending %s; the account after it has %s, %s, %s", x.Balance, x.Held, x.Pending, acct.Balance, acct.Held, acct.Pending)
	}
	if again, err := s.Expire(ctx, "u"); err != nil || again.Entry.Type != "" {
		t.Errorf("a second sweep: %+v, %v; want nothing due", again, err)
	}
	return x
}

// afterSweep applies one mutation of each kind a client sends after the
// sweep: a purchase, its partial refund, a hold and its partial capture, a
// grant. Each must go through, the account audited after each; it returns
// the balance they leave from balance.
func afterSweep(t *testing.T, s ledger.Store, clk *Clock, balance string) string {
	t.Helper()
	b := amount(balance)
	for _, step := range []struct {
		typ   ledger.EntryType
		r     ledger.Request
		delta string
	}{
		{ledger.EntryPurchase, ledger.Request{RequestID: "after-p", Amount: "7", OrderID: "o-after"}, "-7"},
		{ledger.EntryRefund, ledger.Request{RequestID: "after-r", Amount: "2", PurchaseRequestID: "after-p"}, "2"},
		{ledger.EntryHold, ledger.Request{RequestID: "after-h", Amount: "10", Expire: clk.Now().Add(time.Hour)}, "0"},
		{ledger.EntryCapture, ledger.Request{RequestID: "after-c", HoldRequestID: "after-h", Amount: "4"}, "-4"},
		{ledger.EntryGrant, ledger.Request{RequestID: "after-g", Amount: "3", Expire: clk.Now().Add(time.Hour)}, "3"},
	} {
		res := Must(t, s, step.typ, step.r)
		b = b.Add(amount(step.delta))
		acct := Sound(t, s, "u")
		if !res.Balance.Equal(b) || !acct.Balance.Equal(b) || res.Entry.Type != step.typ {
			t.Fatalf("%s %s after the sweep: answered %+v, the account has balance %s; want balance %s", step.typ, step.r.RequestID, res, acct.Balance, b)
		}
	}
	acct := Sound(t, s, "u")
	if !acct.Held.IsZero() || !acct.Pending.IsZero() || len(acct.Holds) != 0 || len(acct.PendingLots) != 0 {
		t.Errorf("account %+v after the capture: want nothing held or pending", acct)
	}
	return b.String()
}

// sweepMaturesAndExpiresAtOnce is the sequence the dispatcher's body test
// writes: a grant that expires, a pending grant, spending, a short grant
// that expires whole, then the clock past both the pending grant's
// effective time and the short grant's expiry, and ONE sweep, which
// matures the one and expires the other in one transaction.
func sweepMaturesAndExpiresAtOnce(t *testing.T, s ledger.Store, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100", Expire: t0.Add(48 * time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending", Amount: "10", Effective: t0.Add(time.Minute)})
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "20", OrderID: "o-1"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "short", Amount: "5", Expire: t0.Add(time.Hour)}) // after the spending: it expires whole
	pending(t, s, "85", "10")
	clk.Add(2 * time.Hour)
	x := sweepOnce(t, s, ledger.EntryMaturation, ledger.EntryExpiration)
	if !x.Balance.Equal(amount("90")) || !x.Pending.IsZero() || !x.Entry.Amount.Equal(amount("-5")) {
		t.Errorf("the sweep = %+v; want the 5 of the short grant expired, balance 90, nothing pending", x)
	}
	if got := afterSweep(t, s, clk, "90"); got != "84" {
		t.Errorf("balance %s after the mutations, want 84", got)
	}
	if got := entryTypes(t, s); got != "[GRANT GRANT PURCHASE GRANT MATURATION EXPIRATION PURCHASE REFUND HOLD CAPTURE GRANT]" {
		t.Errorf("entries %s", got)
	}
}

// sweepMaturesAndExpiresOffTheMicrosecond is the same at times that are
// not whole microseconds, as a caller's time.Now() is (the dispatcher's
// body test): what a store keeps of them is to the microsecond.
func sweepMaturesAndExpiresOffTheMicrosecond(t *testing.T, s ledger.Store, clk *Clock) {
	clk.Add(123456789 * time.Nanosecond)
	sweepMaturesAndExpiresAtOnce(t, s, clk)
}

// sweepWritesEverythingDue: one sweep matures two pending grants (one of
// them into a bucket that has expired by then, the same as an expiring
// grant's), releases an expired hold that drew on two expiring buckets,
// and expires both buckets in one EXPIRATION.
func sweepWritesEverythingDue(t *testing.T, s ledger.Store, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "a", Amount: "5", Expire: t0.Add(time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "b", Amount: "6", Expire: t0.Add(90 * time.Minute)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100", Expire: t0.Add(48 * time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending", Amount: "10", Effective: t0.Add(time.Minute)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending-a", Amount: "4", Effective: t0.Add(time.Minute), Expire: t0.Add(time.Hour)})
	h := Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "8", Expire: t0.Add(30 * time.Minute)})
	if len(h.Entry.Draws) != 2 {
		t.Fatalf("the hold drew %+v; want a's 5 and b's 3", h.Entry.Draws)
	}
	available(t, s, "111", "8")
	clk.Add(2 * time.Hour)
	x := sweepOnce(t, s, ledger.EntryMaturation, ledger.EntryMaturation, ledger.EntryRelease, ledger.EntryExpiration)
	if !x.Balance.Equal(amount("110")) || !x.Held.IsZero() || !x.Pending.IsZero() || !x.Entry.Amount.Equal(amount("-15")) || len(x.Entry.Draws) != 2 {
		t.Errorf("the sweep = %+v; want a's 5 and 4 and b's 6 expired in two draws, balance 110, nothing held or pending", x)
	}
	if got := afterSweep(t, s, clk, "110"); got != "104" {
		t.Errorf("balance %s after the mutations, want 104", got)
	}
}

// sweepsRacePurchases: sweeps and purchases of one user at once, after the
// clock passed two maturities, an expired hold and two buckets' expiries.
// Whichever comes first writes what is due, once; every call is answered
// without error, and the books are what they add up to.
func sweepsRacePurchases(t *testing.T, s ledger.Store, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "1000", Expire: t0.Add(48 * time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "short", Amount: "5", Expire: t0.Add(time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending", Amount: "10", Effective: t0.Add(time.Minute)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending-short", Amount: "3", Effective: t0.Add(time.Minute), Expire: t0.Add(90 * time.Minute)})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "8", Expire: t0.Add(30 * time.Minute)})
	clk.Add(2 * time.Hour)
	errs := raceSweepsAndPurchases(s, 30, 10, nil)
	for _, err := range errs {
		t.Error(err)
	}
	acct := Sound(t, s, "u")
	if !acct.Balance.Equal(amount("980")) || !acct.Held.IsZero() || !acct.Pending.IsZero() {
		t.Errorf("balance %s, held %s, pending %s; want 1000 + 10 + 3 + 5 - 3 - 5 expired - 30 spent = 980, nothing held or pending", acct.Balance, acct.Held, acct.Pending)
	}
	got := entryTypes(t, s)
	for typ, n := range map[ledger.EntryType]int{ledger.EntryMaturation: 2, ledger.EntryRelease: 1, ledger.EntryExpiration: 1, ledger.EntryPurchase: 30} {
		if c := strings.Count(got, string(typ)+" ") + strings.Count(got, string(typ)+"]"); c != n {
			t.Errorf("%d %s entries, want %d: %s", c, typ, n, got)
		}
	}
}

// sweepsRacePurchasesAsTimePasses is sweepsRacePurchases with the clock
// passing the maturities and expiries among the calls: what expires then
// depends on what was spent first, but every call is answered without
// error and the account is the fold of its entries.
func sweepsRacePurchasesAsTimePasses(t *testing.T, s ledger.Store, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "1000", Expire: t0.Add(48 * time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "short", Amount: "20", Expire: t0.Add(time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending", Amount: "10", Effective: t0.Add(time.Minute)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "pending-short", Amount: "3", Effective: t0.Add(time.Minute), Expire: t0.Add(90 * time.Minute)})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "8", Expire: t0.Add(30 * time.Minute)})
	errs := raceSweepsAndPurchases(s, 30, 10, func() { clk.Add(2 * time.Hour) })
	for _, err := range errs {
		t.Error(err)
	}
	acct := Sound(t, s, "u")
	if _, err := s.Expire(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	after := Sound(t, s, "u")
	es, err := s.EntriesAfter(context.Background(), "u", 0, 200)
	if err != nil {
		t.Fatal(err)
	}
	expired := amount("0")
	for _, e := range es {
		if e.Type == ledger.EntryExpiration {
			expired = expired.Sub(e.Amount)
		}
	}
	if want := amount("1000").Add(amount("33")).Sub(amount("30")).Sub(expired); !after.Balance.Equal(want) || !after.Held.IsZero() || !after.Pending.IsZero() || expired.IsZero() {
		t.Errorf("balance %s (before the last sweep %s), held %s, pending %s, %s expired; want 1033 - 30 spent - what expired, nothing held or pending, something expired",
			after.Balance, acct.Balance, after.Held, after.Pending, expired)
	}
}

// raceSweepsAndPurchases sends purchases (of 1 each) and sweeps of user
// "u" from as many goroutines at once; mid, if not nil, runs among them.
// It returns every error any call got.
func raceSweepsAndPurchases(s ledger.Store, purchases, sweeps int, mid func()) []error {
	ctx := context.Background()
	var mu sync.Mutex
	var errs []error
	fail := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range purchases + sweeps {
		wg.Go(func() {
			<-start
			if i == (purchases+sweeps)/2 && mid != nil {
				mid()
			}
			if i%((purchases+sweeps)/sweeps) == 0 {
				if _, err := s.Expire(ctx, "u"); err != nil {
					fail(fmt.Errorf("sweep %d: %w", i, err))
				}
				return
			}
			m, err := ledger.NewMutation(ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: fmt.Sprint("race-p", i), Amount: "1"}, ledger.DefaultScale)
			if err != nil {
				fail(err)
				return
			}
			if _, err := s.Apply(ctx, m); err != nil {
				fail(fmt.Errorf("purchase %d: %w", i, err))
			}
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// refundAtTimesOffTheMicrosecond: what the sweep cases off the microsecond
// found needs no sweep. A refund gives back to the buckets its purchase
// drew from, as the store read them back (to the microsecond); were the
// grant's expiry kept to the nanosecond before, that was a second bucket,
// and the account's next expiry moved by less than a microsecond.
func refundAtTimesOffTheMicrosecond(t *testing.T, s ledger.Store, clk *Clock) {
	clk.Add(123456789 * time.Nanosecond)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Expire: clk.Now().Add(time.Hour)})
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "3"})
	Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r", Amount: "2", PurchaseRequestID: "p"})
	acct := Sound(t, s, "u")
	if len(acct.Buckets) != 1 || !acct.Buckets[0].Amount.Equal(amount("9")) || !acct.NextDue().Equal(clk.Now().Add(time.Hour).Truncate(time.Microsecond)) {
		t.Errorf("buckets %+v, next due %s; want one bucket of 9, due at the grant's expiry to the microsecond", acct.Buckets, acct.NextDue())
	}
}
