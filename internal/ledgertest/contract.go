package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Clock is a time a contract test moves.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock on.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// Contract runs the suite every ledger.Store must pass. newStore returns an
// empty store whose clock is now.
func Contract(t *testing.T, newStore func(t *testing.T, now func() time.Time) ledger.Store) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, s ledger.Store, clk *Clock)
	}{
		{"the balance is the fold of the entries", foldIsBalance},
		{"a request is applied once", appliedOnce},
		{"a refusal is final", refusalIsFinal},
		{"refunds stay within their purchase", refundsWithinPurchase},
		{"a frozen account spends nothing", frozenSpendsNothing},
		{"a status change is checked", statusChangeChecked},
		{"points expire by time", pointsExpire},
		{"an answer is the account after the whole call", answerIsAccountAfterCall},
		{"no double spend under concurrency", noDoubleSpend},
		{"concurrent copies of a new request apply once", concurrentCopies},
		{"a storm on one hot user keeps the books", stormOn(Users("hot", 1), 150)},
		{"a storm on 50 users keeps the books", stormOn(Users("user-", 50), 400)},
		{"a hold is captured or voided", holdsCaptureAndVoid},
		{"a hold resolves once", holdResolvesOnce},
		{"a hold expires by time", holdExpires},
		{"holds are listed by state", holdsListed},
		{"a capture is refunded like a purchase", captureRefunded},
		{"a hold resolves once under concurrency", holdResolvesOnceConcurrently},
		{"a pending grant matures before the next mutation", pendingMaturesBeforeMutation},
		{"the sweeper matures pending grants", sweeperMatures},
		{"a reversal takes pending points first, then spendable ones", reversalPendingThenSpendable},
		{"a reversal is applied once, and its refusals are final", reversalOnceAndFinal},
		{"concurrent reversals never exceed their grant", reversalsConcurrently},
		{"one sweep matures and expires at once, and the next mutations go through", sweepMaturesAndExpiresAtOnce},
		{"one sweep matures and expires at once, at times off the microsecond", sweepMaturesAndExpiresOffTheMicrosecond},
		{"one sweep writes every maturation, release and expiration due", sweepWritesEverythingDue},
		{"sweeps racing purchases write what is due once", sweepsRacePurchases},
		{"sweeps racing purchases as time passes keep the books", sweepsRacePurchasesAsTimePasses},
		{"a refund at times off the microsecond", refundAtTimesOffTheMicrosecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
			c.test(t, newStore(t, clk.Now), clk)
		})
	}
}

func apply(t testing.TB, s ledger.Store, typ ledger.EntryType, r ledger.Request) (ledger.Result, error) {
	t.Helper()
	if r.UserID == "" {
		r.UserID = "u"
	}
	m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	return s.Apply(context.Background(), m)
}

// Must applies a mutation of typ from r (user "u" if r names none) and
// fails the test if it is refused or malformed; it returns the result.
func Must(t testing.TB, s ledger.Store, typ ledger.EntryType, r ledger.Request) ledger.Result {
	t.Helper()
	res, err := apply(t, s, typ, r)
	if err != nil {
		t.Fatalf("%s %+v: %v", typ, r, err)
	}
	return res
}

// Sound audits a user's partition, as the store reads it (ledger.Audit:
// versions 1..N, the account is the fold of its entries, request and hold
// records match the entries, refunds stay within their purchases), checks
// that Balance reads the same account, and returns that account. Nothing
// may write to the user meanwhile.
func Sound(tb testing.TB, s ledger.Store, user string) ledger.Account {
	tb.Helper()
	ctx := context.Background()
	p, err := s.Partition(ctx, user)
	if err != nil {
		tb.Fatal(err)
	}
	if _, findings := ledger.Audit(p, time.Time{}); len(findings) > 0 {
		tb.Fatalf("account %+v, its %d entries: %v", p.Account, len(p.Entries), findings)
	}
	acct, err := s.Balance(ctx, user)
	if err != nil {
		tb.Fatal(err)
	}
	if acct.Version != p.Account.Version || !acct.Balance.Equal(p.Account.Balance) || !acct.Held.Equal(p.Account.Held) || !acct.Pending.Equal(p.Account.Pending) {
		tb.Fatalf("Balance reads %+v, the audited partition has %+v", acct, p.Account)
	}
	return acct
}

func amount(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func foldIsBalance(t *testing.T, s ledger.Store, _ *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "30.5"})
	r := Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r", Amount: "10", PurchaseRequestID: "p"})
	if r.Entry.Version != 3 || !r.Balance.Equal(amount("79.5")) {
		t.Errorf("refund = %+v, want version 3, balance 79.5", r)
	}
	if acct := Sound(t, s, "u"); !acct.Balance.Equal(amount("79.5")) {
		t.Errorf("balance %s, want 79.5", acct.Balance)
	}
}

func appliedOnce(t *testing.T, s ledger.Store, _ *Clock) {
	first := Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "5"})
	again := Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "5"})
	if !again.Replayed || again.Entry.ID != first.Entry.ID {
		t.Errorf("the same request again = %+v, want the original, replayed", again)
	}
	if _, err := apply(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "6"}); ledger.ReasonOf(err) != ledger.ReasonRequestIDReused {
		t.Errorf("another request under the same id: %v, want %s", err, ledger.ReasonRequestIDReused)
	}
	if acct := Sound(t, s, "u"); acct.Version != 1 {
		t.Errorf("version %d, want 1", acct.Version)
	}
}

func refusalIsFinal(t *testing.T, s ledger.Store, _ *Clock) {
	if _, err := apply(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "5"}); ledger.ReasonOf(err) != ledger.ReasonInsufficientBalance {
		t.Fatalf("a purchase with nothing: %v", err)
	}
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10"})
	_, err := apply(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "5"})
	if e, ok := ledger.AsError(err); !ok || e.Reason != ledger.ReasonInsufficientBalance || !e.Replayed {
		t.Errorf("the refused purchase again, once covered: %v, want the same refusal, replayed", err)
	}
	if acct := Sound(t, s, "u"); !acct.Balance.Equal(amount("10")) {
		t.Errorf("balance %s, want 10: the refused purchase spent nothing", acct.Balance)
	}
}

func refundsWithinPurchase(t *testing.T, s ledger.Store, _ *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "10"})
	Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r1", Amount: "6", PurchaseRequestID: "p"})
	if _, err := apply(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r2", Amount: "5", PurchaseRequestID: "p"}); ledger.ReasonOf(err) != ledger.ReasonRefundExceedsPurchase {
		t.Errorf("refunds of 6 + 5 of 10: %v, want %s", err, ledger.ReasonRefundExceedsPurchase)
	}
	if _, err := apply(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r3", Amount: "1", PurchaseRequestID: "nothing"}); ledger.ReasonOf(err) != ledger.ReasonPurchaseNotFound {
		t.Errorf("a refund of no purchase: %v, want %s", err, ledger.ReasonPurchaseNotFound)
	}
	if acct := Sound(t, s, "u"); !acct.Balance.Equal(amount("96")) {
		t.Errorf("balance %s, want 96", acct.Balance)
	}
}

func frozenSpendsNothing(t *testing.T, s ledger.Store, _ *Clock) {
	ctx := context.Background()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10"})
	if _, changed, err := s.SetStatus(ctx, "u", ledger.StatusFrozen, "review"); err != nil || !changed {
		t.Fatalf("freeze: %v, %v", changed, err)
	}
	if _, err := apply(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "1"}); ledger.ReasonOf(err) != ledger.ReasonAccountFrozen {
		t.Errorf("a purchase on a frozen account: %v, want %s", err, ledger.ReasonAccountFrozen)
	}
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "1"}) // credits still apply
	if acct := Sound(t, s, "u"); !acct.Balance.Equal(amount("11")) || acct.Status != ledger.StatusFrozen {
		t.Errorf("account %+v, want 11, frozen", acct)
	}
}

func statusChangeChecked(t *testing.T, s ledger.Store, _ *Clock) {
	ctx := context.Background()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "1"})
	for _, tt := range []struct {
		name, user string
		status     ledger.Status
		reason     string
		want       string
	}{
		{name: "no user", status: ledger.StatusFrozen, want: ledger.ReasonInvalidUserID},
		{name: "no status", user: "u", want: ledger.ReasonInvalidStatus},
		{name: "an unknown status", user: "u", status: "CLOSED", want: ledger.ReasonInvalidStatus},
		{name: "a reason with a control character", user: "u", status: ledger.StatusFrozen, reason: "fraud\x1b[2J", want: ledger.ReasonInvalidStatus},
		{name: "a reason too long", user: "u", status: ledger.StatusFrozen, reason: strings.Repeat("r", ledger.MaxReasonBytes+1), want: ledger.ReasonInvalidStatus},
		{name: "a user without an account", user: "nobody", status: ledger.StatusFrozen, want: ledger.ReasonAccountNotFound},
	} {
		if _, _, err := s.SetStatus(ctx, tt.user, tt.status, tt.reason); ledger.ReasonOf(err) != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.want)
		}
	}
	if acct := Sound(t, s, "u"); acct.Status != ledger.StatusActive {
		t.Errorf("status %s after refused changes, want ACTIVE", acct.Status)
	}
}

func pointsExpire(t *testing.T, s ledger.Store, clk *Clock) {
	ctx := context.Background()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "5", Expire: clk.Now().Add(time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "3"})
	p := Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "2"})
	if len(p.Entry.Draws) != 1 || !p.Entry.Draws[0].Expire.Equal(clk.Now().Add(time.Hour)) {
		t.Errorf("purchase drew %+v, want the expiring points first", p.Entry.Draws)
	}
	clk.Add(time.Hour)
	x, err := s.Expire(ctx, "u")
	if err != nil || x.Entry.Type != ledger.EntryExpiration || !x.Entry.Amount.Equal(amount("-3")) {
		t.Fatalf("expire at the expiry: %+v, %v; want an EXPIRATION of the 3 left", x, err)
	}
	if x, err := s.Expire(ctx, "u"); err != nil || x.Entry.Type != "" {
		t.Errorf("expire again: %+v, %v; want nothing due", x, err)
	}
	if acct := Sound(t, s, "u"); !acct.Balance.Equal(amount("3")) || !acct.Spendable(clk.Now()).Equal(amount("3")) {
		t.Errorf("account %+v, want the 3 that never expire", acct)
	}
}

// answerIsAccountAfterCall: a call that writes an expiration after its own
// entry (a refund into an expired bucket; a void of points whose bucket
// expired while held) answers the account after that expiration, as a
// balance read then says, and so does its replay; its entry keeps its own
// balance_after (issue 22, item 2).
func answerIsAccountAfterCall(t *testing.T, s ledger.Store, clk *Clock) {
	ctx := context.Background()
	check := func(what string, res ledger.Result, entryBalance string) {
		t.Helper()
		acct, err := s.Balance(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Balance.Equal(acct.Balance) || !res.Held.Equal(acct.Held) {
			t.Errorf("%s answered balance %s, held %s; the account after it has %s and %s", what, res.Balance, res.Held, acct.Balance, acct.Held)
		}
		if !res.Entry.BalanceAfter.Equal(amount(entryBalance)) {
			t.Errorf("%s: its entry's balance_after %s, want its own %s", what, res.Entry.BalanceAfter, entryBalance)
		}
	}
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "5", Expire: clk.Now().Add(time.Hour)})
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "2"})
	clk.Add(time.Hour) // the 3 left expire; the refund's 2 go back to the expired bucket
	refund := ledger.Request{RequestID: "r", PurchaseRequestID: "p", Amount: "2"}
	r := Must(t, s, ledger.EntryRefund, refund)
	check("a refund into an expired bucket", r, "2")
	if !r.Balance.IsZero() {
		t.Errorf("the refund answered balance %s, want 0: its points expired at once", r.Balance)
	}
	again := Must(t, s, ledger.EntryRefund, refund)
	check("its replay", again, "2")
	if !again.Replayed {
		t.Errorf("the refund's replay = %+v, want replayed", again)
	}

	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "10", Expire: clk.Now().Add(time.Hour)})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "4", Expire: clk.Now().Add(2 * time.Hour)})
	clk.Add(time.Hour) // 6 expire; the 4 held stay held until the hold resolves
	void := ledger.Request{RequestID: "v", HoldRequestID: "h"}
	v := Must(t, s, ledger.EntryRelease, void)
	check("a void of held points whose bucket expired", v, "4")
	if !v.Balance.IsZero() || !v.Held.IsZero() {
		t.Errorf("the void answered balance %s, held %s; want 0 and 0", v.Balance, v.Held)
	}
	check("its replay", Must(t, s, ledger.EntryRelease, void), "4")
	Sound(t, s, "u")
}

// noDoubleSpend: 100 purchases of 10 at once against a balance of 500.
func noDoubleSpend(t *testing.T, s ledger.Store, _ *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "500"})
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 100 {
		wg.Go(func() {
			<-start
			_, err := apply(t, s, ledger.EntryPurchase, ledger.Request{RequestID: fmt.Sprint("p", i), Amount: "10"})
			switch {
			case err == nil:
				ok.Add(1)
			case ledger.ReasonOf(err) == ledger.ReasonInsufficientBalance:
				refused.Add(1)
			default:
				t.Errorf("purchase %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	acct := Sound(t, s, "u")
	if ok.Load() != 50 || refused.Load() != 50 || !acct.Balance.IsZero() || acct.Version != 51 {
		t.Errorf("%d purchases of 10 on 500 went through and %d were refused, leaving %s at version %d; want 50, 50, 0 and 51",
			ok.Load(), refused.Load(), acct.Balance, acct.Version)
	}
}

// concurrentCopies: 50 copies of one new purchase at once are one purchase,
// and every copy answers with its entry.
func concurrentCopies(t *testing.T, s ledger.Store, _ *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	results := make([]ledger.Result, 50)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		wg.Go(func() {
			<-start
			res, err := apply(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "the-one", Amount: "5"})
			if err != nil {
				t.Errorf("copy %d: %v", i, err)
			}
			results[i] = res
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for _, r := range results {
		if !r.Replayed {
			fresh++
		}
		if r.Entry.ID != results[0].Entry.ID || r.Entry.Version != 2 {
			t.Errorf("copies answered with entries %s (version %d) and %s", r.Entry.ID, r.Entry.Version, results[0].Entry.ID)
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers say not replayed, want exactly 1", fresh)
	}
	if acct := Sound(t, s, "u"); !acct.Balance.Equal(amount("95")) || acct.Version != 2 {
		t.Errorf("account %+v, want 95 at version 2: one purchase", acct)
	}
}

// stormOn is a Storm of ops on users, each seeded with a grant of 10 first
// (little, so that purchases are refused as well as applied):
// afterwards every user's account is the fold of its entries and holds what
// the acknowledged requests add up to.
func stormOn(users []string, ops int) func(t *testing.T, s ledger.Store, _ *Clock) {
	return func(t *testing.T, s ledger.Store, _ *Clock) {
		for _, u := range users {
			Must(t, s, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "seed", Amount: "10"})
		}
		books := Storm(t, s, users, 32, ops, 7)
		t.Logf("%d acknowledged, %d refused", books.Acknowledged, books.Refused)
		// Spread over many users, the seeds run out and purchases are
		// refused; one user's balance mostly grows under Storm's mix (as
		// many grants as purchases), so there a refusal is likely but not
		// certain: noDoubleSpend races refusals on one user.
		if books.Acknowledged == 0 || len(users) > 1 && books.Refused == 0 {
			t.Errorf("the storm should both succeed and be refused; it did %d and %d", books.Acknowledged, books.Refused)
		}
		for _, u := range users {
			want := amount("10").Add(books.Balances[u])
			if acct := Sound(t, s, u); !acct.Balance.Equal(want) {
				t.Errorf("%s: balance %s, but the acknowledged requests add up to %s", u, acct.Balance, want)
			}
		}
	}
}

// refused applies a request that must be refused for reason, and returns
// the refusal.
func refused(t *testing.T, s ledger.Store, typ ledger.EntryType, r ledger.Request, reason string) ledger.Error {
	t.Helper()
	res, err := apply(t, s, typ, r)
	e, ok := ledger.AsError(err)
	if !ok || e.Reason != reason {
		t.Fatalf("%s %+v: %+v, %v; want %s", typ, r, res, err, reason)
	}
	return *e
}

// available checks the user's balance and what it holds.
func available(t *testing.T, s ledger.Store, balance, held string) {
	t.Helper()
	acct := Sound(t, s, "u")
	if !acct.Balance.Equal(amount(balance)) || !acct.Held.Equal(amount(held)) || !acct.Available().Equal(amount(balance).Sub(amount(held))) {
		t.Fatalf("balance %s, held %s; want %s and %s", acct.Balance, acct.Held, balance, held)
	}
}

func holdsCaptureAndVoid(t *testing.T, s ledger.Store, clk *Clock) {
	expire := clk.Now().Add(time.Hour)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	a := Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "40", OrderID: "order-1", Expire: expire})
	if h := a.Hold; h.RequestID != "h1" || h.State != ledger.HoldHeld || !h.Amount.Equal(amount("40")) || h.OrderID != "order-1" ||
		!h.ExpireTime.Equal(expire) || h.Version != 2 || h.UserID != "u" {
		t.Errorf("authorize's hold = %+v", h)
	}
	if e := a.Entry; e.Type != ledger.EntryHold || !e.Amount.IsZero() || !e.HeldChange.Equal(amount("40")) || !e.HeldAfter.Equal(amount("40")) || !a.Balance.Equal(amount("100")) {
		t.Errorf("authorize's entry = %+v, balance %s", e, a.Balance)
	}
	available(t, s, "100", "40")
	refused(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "60.01"}, ledger.ReasonInsufficientBalance)

	c := Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"}) // all of it
	if e := c.Entry; e.Type != ledger.EntryCapture || !e.Amount.Equal(amount("-40")) || !e.HeldChange.Equal(amount("-40")) || e.HoldRequestID != "h1" ||
		c.Hold.State != ledger.HoldCaptured || !c.Hold.CapturedAmount.Equal(amount("40")) || c.Hold.ResolveVersion != e.Version || e.OrderID != "order-1" {
		t.Errorf("capture = %+v", c)
	}
	available(t, s, "60", "0")

	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "30", Expire: expire})
	c = Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c2", HoldRequestID: "h2", Amount: "10"})
	if !c.Entry.Amount.Equal(amount("-10")) || !c.Hold.CapturedAmount.Equal(amount("10")) || !c.Balance.Equal(amount("50")) {
		t.Errorf("a capture of 10 of 30 = %+v", c)
	}
	available(t, s, "50", "0") // the 20 not captured are back

	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h3", Amount: "20", Expire: expire})
	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c3", HoldRequestID: "h3", Amount: "20.01"}, ledger.ReasonCaptureExceedsHold)
	v := Must(t, s, ledger.EntryRelease, ledger.Request{RequestID: "v3", HoldRequestID: "h3"})
	if e := v.Entry; e.Type != ledger.EntryRelease || !e.Amount.IsZero() || !e.HeldChange.Equal(amount("-20")) || e.Reason != ledger.ReleaseVoided ||
		v.Hold.State != ledger.HoldVoided || v.Hold.RequestID != "h3" {
		t.Errorf("void = %+v", v)
	}
	available(t, s, "50", "0")
}

func holdResolvesOnce(t *testing.T, s ledger.Store, clk *Clock) {
	expire := clk.Now().Add(time.Hour)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "10", Expire: expire})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "10", Expire: expire})
	first := Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"})
	Must(t, s, ledger.EntryRelease, ledger.Request{RequestID: "v2", HoldRequestID: "h2"})

	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1-again", HoldRequestID: "h1"}, ledger.ReasonHoldNotHeld)
	refused(t, s, ledger.EntryRelease, ledger.Request{RequestID: "v1", HoldRequestID: "h1"}, ledger.ReasonHoldNotHeld)
	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c2", HoldRequestID: "h2"}, ledger.ReasonHoldNotHeld)
	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c3", HoldRequestID: "nothing"}, ledger.ReasonHoldNotFound)
	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c4", HoldRequestID: "g"}, ledger.ReasonHoldNotFound) // a grant is no hold

	// The capture again: its original entry, and the hold as it is.
	again := Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"})
	if !again.Replayed || again.Entry.ID != first.Entry.ID || again.Hold.State != ledger.HoldCaptured || again.Hold.ResolveVersion != first.Entry.Version {
		t.Errorf("the capture again = %+v, want %+v replayed", again, first)
	}
	// A refused capture again: the same refusal, even once another hold
	// of that id could be captured.
	e := refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c3", HoldRequestID: "nothing"}, ledger.ReasonHoldNotFound)
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "nothing", Amount: "1", Expire: expire})
	if e2 := refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c3", HoldRequestID: "nothing"}, ledger.ReasonHoldNotFound); !e2.Replayed || e2.Message != e.Message {
		t.Errorf("the refused capture again: %+v, want %+v replayed", e2, e)
	}
	if acct := Sound(t, s, "u"); acct.Version != 6 || !acct.Balance.Equal(amount("90")) || !acct.Held.Equal(amount("1")) {
		t.Errorf("account %+v, want version 6, balance 90, 1 held", acct)
	}
}

func holdExpires(t *testing.T, s ledger.Store, clk *Clock) {
	ctx := context.Background()
	expire := clk.Now().Add(time.Hour)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "30", Expire: expire})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "20", Expire: expire})
	clk.Add(time.Hour - time.Microsecond)
	Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c2", HoldRequestID: "h2"}) // a microsecond before: in time
	clk.Add(time.Microsecond)
	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"}, ledger.ReasonHoldExpired)
	refused(t, s, ledger.EntryRelease, ledger.Request{RequestID: "v1", HoldRequestID: "h1"}, ledger.ReasonHoldExpired)
	if acct := Sound(t, s, "u"); !acct.At(clk.Now()).Available().Equal(amount("80")) {
		t.Errorf("available at the expiry: %s, want 80 (the expired hold's 30 back)", acct.At(clk.Now()).Available())
	}
	x, err := s.Expire(ctx, "u")
	if err != nil || x.Entry.Type != ledger.EntryRelease || x.Entry.Reason != ledger.ReleaseExpired || x.Entry.HoldRequestID != "h1" || !x.Entry.HeldChange.Equal(amount("-30")) {
		t.Fatalf("the sweeper at the expiry: %+v, %v; want the RELEASE of h1", x, err)
	}
	available(t, s, "80", "0")
	if x, err := s.Expire(ctx, "u"); err != nil || x.Entry.Type != "" {
		t.Errorf("the sweeper again: %+v, %v; want nothing due", x, err)
	}
	refused(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1-later", HoldRequestID: "h1"}, ledger.ReasonHoldExpired)
	hs, _, err := s.Holds(ctx, "u", ledger.HoldQuery{States: []ledger.HoldState{ledger.HoldExpired}})
	if err != nil || len(hs) != 1 || hs[0].RequestID != "h1" || hs[0].State != ledger.HoldExpired || hs[0].ResolveVersion != 5 {
		t.Errorf("expired holds = %+v, %v; want h1, released by entry 5", hs, err)
	}
}

func holdsListed(t *testing.T, s ledger.Store, clk *Clock) {
	ctx := context.Background()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	for i, ttl := range []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour, 10 * time.Minute, 4 * time.Hour} {
		Must(t, s, ledger.EntryHold, ledger.Request{RequestID: fmt.Sprint("h", i), Amount: "1", Expire: clk.Now().Add(ttl)})
	}
	Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"})
	Must(t, s, ledger.EntryRelease, ledger.Request{RequestID: "v2", HoldRequestID: "h2"})
	clk.Add(10 * time.Minute) // h3 expires, by time only
	ids := func(q ledger.HoldQuery) []string {
		t.Helper()
		var out []string
		for pages := 0; ; pages++ {
			hs, next, err := s.Holds(ctx, "u", q)
			if err != nil || pages > 10 {
				t.Fatalf("holds %+v: %v (page %d)", q, err, pages)
			}
			for _, h := range hs {
				out = append(out, fmt.Sprint(h.RequestID, ":", h.StateAt(clk.Now())))
			}
			if next == "" {
				return out
			}
			q.PageToken = next
		}
	}
	for _, tc := range []struct {
		states []ledger.HoldState
		want   []string
	}{
		{nil, []string{"h0:HELD", "h4:HELD"}},
		{[]ledger.HoldState{ledger.HoldCaptured, ledger.HoldVoided}, []string{"h1:CAPTURED", "h2:VOIDED"}},
		{[]ledger.HoldState{ledger.HoldExpired}, []string{"h3:EXPIRED"}},
		{[]ledger.HoldState{ledger.HoldHeld, ledger.HoldExpired, ledger.HoldVoided, ledger.HoldCaptured}, []string{"h0:HELD", "h1:CAPTURED", "h2:VOIDED", "h3:EXPIRED", "h4:HELD"}},
	} {
		for _, size := range []int{1, 2, 0} {
			if got := ids(ledger.HoldQuery{Page: ledger.Page{PageSize: size}, States: tc.states}); !slices.Equal(got, tc.want) {
				t.Errorf("holds %v, page size %d: %v, want %v", tc.states, size, got, tc.want)
			}
		}
	}
	if _, _, err := s.Holds(ctx, "u", ledger.HoldQuery{Page: ledger.Page{PageToken: "!!!"}}); ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
		t.Errorf("a bad page token: %v, want %s", err, ledger.ReasonInvalidPageToken)
	}
	if hs, next, err := s.Holds(ctx, "nobody", ledger.HoldQuery{}); err != nil || len(hs) != 0 || next != "" {
		t.Errorf("the holds of a user with none: %v, %q, %v", hs, next, err)
	}
}

func captureRefunded(t *testing.T, s ledger.Store, clk *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "30", Expire: clk.Now().Add(time.Hour)})
	Must(t, s, ledger.EntryCapture, ledger.Request{RequestID: "c", HoldRequestID: "h"}) // all of it: the request names no amount
	r := Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r1", Amount: "20", PurchaseRequestID: "c"})
	if r.Entry.PurchaseVersion != 3 || !r.Balance.Equal(amount("90")) {
		t.Errorf("refund of the capture = %+v, want of version 3, balance 90", r)
	}
	refused(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r2", Amount: "10.01", PurchaseRequestID: "c"}, ledger.ReasonRefundExceedsPurchase)
	refused(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r3", Amount: "1", PurchaseRequestID: "h"}, ledger.ReasonPurchaseNotFound)
	Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r4", Amount: "10", PurchaseRequestID: "c"})
	entries, err := s.EntriesAfter(context.Background(), "u", 2, 1)
	if err != nil || len(entries) != 1 || !entries[0].RefundedAmount.Equal(amount("30")) {
		t.Errorf("the capture after its refunds: %+v, %v; want 30 refunded", entries, err)
	}
	available(t, s, "100", "0")
}

func holdResolvesOnceConcurrently(t *testing.T, s ledger.Store, clk *Clock) {
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10"})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "10", Expire: clk.Now().Add(time.Hour)})
	var won atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			typ := ledger.EntryCapture
			if i%2 == 1 {
				typ = ledger.EntryRelease
			}
			_, err := apply(t, s, typ, ledger.Request{RequestID: fmt.Sprint("r", i), HoldRequestID: "h"})
			switch {
			case err == nil:
				won.Add(1)
			case ledger.ReasonOf(err) != ledger.ReasonHoldNotHeld:
				t.Errorf("%s %d: %v", typ, i, err)
			}
		})
	}
	wg.Wait()
	if acct := Sound(t, s, "u"); won.Load() != 1 || acct.Version != 3 || !acct.Held.IsZero() {
		t.Errorf("%d captures and voids of one hold went through; account %+v; want 1, version 3, nothing held", won.Load(), acct)
	}
}
