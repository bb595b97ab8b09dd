package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// book is one user's ledger as the domain keeps it: the entries decided so
// far and the account they make.
type book struct {
	tb      testing.TB
	acct    Account
	entries []Entry
	n       int
}

func newBook(tb testing.TB) *book { return &book{tb: tb, acct: NewAccount("u")} }

// do decides a mutation at t and, unless refused, appends its entries.
func (b *book) do(t time.Time, typ EntryType, r Request, f Facts) (Decision, error) {
	b.tb.Helper()
	b.n++
	r.UserID, r.RequestID = "u", fmt.Sprint("r", b.n)
	m, err := NewMutation(typ, r, DefaultScale)
	if err != nil {
		b.tb.Fatal(err)
	}
	d, err := Decide(b.acct, m, t, f)
	if err != nil {
		return d, err
	}
	b.entries = append(b.entries, d.Entries...)
	b.acct = d.After
	return d, nil
}

func (b *book) must(t time.Time, typ EntryType, r Request, f Facts) Decision {
	b.tb.Helper()
	d, err := b.do(t, typ, r, f)
	if err != nil {
		b.tb.Fatalf("%s %+v at %s: %v", typ, r, t, err)
	}
	return d
}

// purchaseRef is the purchase decided in d, as a refund's facts show it.
func purchaseRef(d Decision, refunded string) *PurchaseRef {
	e := d.Entry()
	return &PurchaseRef{Version: e.Version, Type: e.Type, Amount: e.Amount.Neg(), Draws: e.Draws, Refunded: decimal.RequireFromString(refunded)}
}

func draws(ds ...any) []Draw {
	var out []Draw
	for i := 0; i < len(ds); i += 2 {
		out = append(out, Draw{Expire: ds[i].(time.Time), Amount: decimal.RequireFromString(ds[i+1].(string))})
	}
	return out
}

func sameDraws(a, b []Draw) bool {
	return slices.EqualFunc(a, b, func(x, y Draw) bool { return x.Expire.Equal(y.Expire) && x.Amount.Equal(y.Amount) })
}

func TestSpendingOrderIsSoonestExpiryFirstNeverLast(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	day := 24 * time.Hour
	b.must(t0, EntryGrant, Request{Amount: "10"}, Facts{})                          // never
	b.must(t0, EntryGrant, Request{Amount: "5", Expire: t0.Add(30 * day)}, Facts{}) // late
	b.must(t0, EntryGrant, Request{Amount: "3", Expire: t0.Add(7 * day)}, Facts{})  // soon
	b.must(t0, EntryGrant, Request{Amount: "2", Expire: t0.Add(7 * day)}, Facts{})  // merges with soon
	if len(b.acct.Buckets) != 3 {
		t.Fatalf("buckets = %+v, want 3 (same expiry merges)", b.acct.Buckets)
	}
	p := b.must(t0.Add(day), EntryPurchase, Request{Amount: "12"}, Facts{})
	if want := draws(t0.Add(7*day), "5", t0.Add(30*day), "5", time.Time{}, "2"); !sameDraws(p.Entry().Draws, want) {
		t.Errorf("purchase of 12 drew %+v, want %+v", p.Entry().Draws, want)
	}
	if !b.acct.Balance.Equal(d("8")) || len(b.acct.Buckets) != 1 || !b.acct.Buckets[0].Expire.IsZero() {
		t.Errorf("after: %+v, want 8 never-expiring", b.acct)
	}
}

// A bucket is spendable strictly before its expire_time: at exactly that
// time it has expired, and the expiration is on the record first.
func TestABucketExpiresAtItsExpireTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		at      time.Time
		reason  string
		entries int // appended
	}{
		{"a microsecond before", t0.Add(time.Hour - time.Microsecond), "", 1},
		{"at exactly expire_time", t0.Add(time.Hour), ReasonInsufficientBalance, 0},
		{"after", t0.Add(2 * time.Hour), ReasonInsufficientBalance, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(time.Hour)}, Facts{})
			if got := b.acct.Spendable(tc.at); tc.reason == "" && !got.Equal(d("10")) || tc.reason != "" && !got.IsZero() {
				t.Errorf("spendable at %s = %s", tc.at, got)
			}
			dec, err := b.do(tc.at, EntryPurchase, Request{Amount: "10"}, Facts{})
			if ReasonOf(err) != tc.reason || len(dec.Entries) != tc.entries {
				t.Fatalf("purchase: %d entries, %v; want %d, reason %q", len(dec.Entries), err, tc.entries, tc.reason)
			}
			if tc.reason == "" {
				return
			}
			// The sweeper (or the next mutation) puts it on the record.
			x := DecideExpiry(b.acct, tc.at)
			if len(x.Entries) != 1 || x.Entries[0].Type != EntryExpiration || !x.Entries[0].Amount.Equal(d("-10")) || !x.After.Balance.IsZero() {
				t.Errorf("expiry = %+v, want one EXPIRATION of 10 to a balance of 0", x)
			}
			// A grant then is preceded by the expiration, in one decision.
			g := b.must(tc.at, EntryGrant, Request{Amount: "1"}, Facts{})
			if len(g.Entries) != 2 || g.Entries[0].Type != EntryExpiration || g.Main != 1 || g.Entry().Version != 3 || !g.After.Balance.Equal(d("1")) {
				t.Errorf("grant after expiry = %+v, want EXPIRATION (v2) then GRANT (v3), balance 1", g)
			}
		})
	}
}

func TestARefundGoesBackToTheBucketsItsPurchaseDrew(t *testing.T) {
	t.Parallel()
	soon, late := t0.Add(time.Hour), t0.Add(48*time.Hour)
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "4", Expire: soon}, Facts{})
	b.must(t0, EntryGrant, Request{Amount: "6", Expire: late}, Facts{})
	b.must(t0, EntryGrant, Request{Amount: "5"}, Facts{})
	p := b.must(t0, EntryPurchase, Request{Amount: "12"}, Facts{}) // 4 soon, 6 late, 2 never

	// Last drawn first: 2 to never, then 1 of late's 6.
	r1 := b.must(t0.Add(time.Minute), EntryRefund, Request{Amount: "3", PurchaseRequestID: "p"}, Facts{Purchase: purchaseRef(p, "0")})
	if want := draws(time.Time{}, "2", late, "1"); !sameDraws(r1.Entry().Draws, want) {
		t.Errorf("first refund gave back %+v, want %+v", r1.Entry().Draws, want)
	}
	// After soon expired: the rest of late's 6 is live, soon's 4 expires at
	// once, on the record, after the refund.
	r2 := b.must(soon, EntryRefund, Request{Amount: "9", PurchaseRequestID: "p"}, Facts{Purchase: purchaseRef(p, "3")})
	if want := draws(late, "5", soon, "4"); !sameDraws(r2.Entry().Draws, want) {
		t.Errorf("second refund gave back %+v, want %+v", r2.Entry().Draws, want)
	}
	last := r2.Entries[len(r2.Entries)-1]
	if len(r2.Entries) != 2 || r2.Main != 0 || last.Type != EntryExpiration || !last.Amount.Equal(d("-4")) || !sameDraws(last.Draws, draws(soon, "4")) {
		t.Errorf("second refund's entries = %+v, want the refund, then the expiration of soon's 4", r2.Entries)
	}
	if !b.acct.Balance.Equal(d("11")) || !b.acct.Spendable(soon).Equal(d("11")) {
		t.Errorf("after the refunds: %+v, want 3 + 3 + 9 - 4 expired = 11, all spendable", b.acct)
	}
}

func TestExpiryRefusals(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	if _, err := b.do(t0, EntryGrant, Request{Amount: "1", Expire: t0}, Facts{}); ReasonOf(err) != ReasonInvalidExpiry {
		t.Errorf("a grant expiring at its own time: %v, want %s", err, ReasonInvalidExpiry)
	}
	for i := range 3 {
		b.must(t0, EntryGrant, Request{Amount: "1", Expire: t0.Add(time.Duration(i+1) * time.Hour)}, Facts{MaxBuckets: 3})
	}
	if _, err := b.do(t0, EntryGrant, Request{Amount: "1", Expire: t0.Add(10 * time.Hour)}, Facts{MaxBuckets: 3}); ReasonOf(err) != ReasonTooManyBuckets {
		t.Errorf("a fourth expiry time of 3 allowed: %v, want %s", err, ReasonTooManyBuckets)
	}
	b.must(t0, EntryGrant, Request{Amount: "1", Expire: t0.Add(2 * time.Hour)}, Facts{MaxBuckets: 3}) // an expiry it holds
	if _, err := NewMutation(EntryPurchase, Request{UserID: "u", RequestID: "x", Amount: "1", Expire: t0}, DefaultScale); ReasonOf(err) != ReasonInvalidExpiry {
		t.Errorf("a purchase with an expiry: %v, want %s", err, ReasonInvalidExpiry)
	}
}

// Entry times never go back: a process whose clock is behind the user's
// last entry decides at that entry's time.
func TestEntryTimeIsNeverBeforeThePrevious(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(time.Hour)}, Facts{})
	g := b.must(t0.Add(2*time.Hour), EntryGrant, Request{Amount: "1"}, Facts{})
	late := b.must(t0, EntryGrant, Request{Amount: "1"}, Facts{}) // a clock two hours behind
	if !late.Entry().CreateTime.Equal(g.Entry().CreateTime) {
		t.Errorf("entry decided on a clock behind: %s, want the previous entry's %s", late.Entry().CreateTime, g.Entry().CreateTime)
	}
}

// Random mutations at random times against one account: whatever happens,
// the decided account is the fold of the entries, the buckets sum to the
// balance, nothing is drawn from a bucket that had expired (but by an
// expiration), and the balance is never negative.
func TestDecisionsAreTheFoldOfTheirEntries(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		b := newBook(t)
		now := t0
		var purchases []Decision
		refunded := map[int64]decimal.Decimal{}
		for range 60 {
			now = now.Add(time.Duration(rng.IntN(90)) * time.Minute)
			amount := decimal.New(int64(1+rng.IntN(2000)), -2)
			var err error
			var dec Decision
			switch rng.IntN(5) {
			case 0, 1:
				r := Request{Amount: amount.String()}
				if rng.IntN(4) > 0 {
					r.Expire = now.Add(time.Duration(1+rng.IntN(8)) * time.Hour)
				}
				dec, err = b.do(now, EntryGrant, r, Facts{MaxBuckets: 6})
			case 2, 3:
				dec, err = b.do(now, EntryPurchase, Request{Amount: amount.String()}, Facts{})
				if err == nil {
					purchases = append(purchases, dec)
				}
			case 4:
				if len(purchases) == 0 {
					continue
				}
				p := purchases[rng.IntN(len(purchases))]
				pe := p.Entry()
				left := pe.Amount.Neg().Sub(refunded[pe.Version])
				if !left.IsPositive() {
					continue
				}
				amount = decimal.Min(amount, left)
				dec, err = b.do(now, EntryRefund, Request{Amount: amount.String(), PurchaseRequestID: pe.RequestID}, Facts{Purchase: purchaseRef(p, refunded[pe.Version].String())})
				if err == nil {
					refunded[pe.Version] = refunded[pe.Version].Add(amount)
				}
			}
			if e, ok := AsError(err); err != nil && (!ok || e.Kind != KindFailedPrecondition) {
				t.Fatalf("seed %d: %v", seed, err)
			}
			for _, e := range dec.Entries {
				for _, dr := range e.Draws {
					if e.Type == EntryPurchase && !live(dr.Expire, e.CreateTime) {
						t.Fatalf("seed %d: purchase v%d at %s drew from a bucket expired at %s", seed, e.Version, e.CreateTime, dr.Expire)
					}
				}
			}
		}
		folded, _, err := Fold("u", b.entries)
		if err != nil {
			t.Fatal(err)
		}
		bucketSum := decimal.Zero
		for _, bk := range b.acct.Buckets {
			bucketSum = bucketSum.Add(bk.Amount)
			if !bk.Amount.IsPositive() {
				t.Fatalf("seed %d: an empty bucket is kept: %+v", seed, b.acct.Buckets)
			}
		}
		if folded.Version != b.acct.Version || !folded.Balance.Equal(b.acct.Balance) || !bucketSum.Equal(b.acct.Balance) || b.acct.Balance.IsNegative() ||
			!slices.EqualFunc(folded.Buckets, b.acct.Buckets, func(x, y Bucket) bool { return x.Expire.Equal(y.Expire) && x.Amount.Equal(y.Amount) }) {
			t.Fatalf("seed %d: decided %+v, fold %+v, buckets sum %s", seed, b.acct, folded, bucketSum)
		}
		for i, e := range b.entries {
			if e.Version != int64(i+1) || (i > 0 && e.CreateTime.Before(b.entries[i-1].CreateTime)) {
				t.Fatalf("seed %d: entry %d: version %d at %s", seed, i, e.Version, e.CreateTime)
			}
		}
	}
}
