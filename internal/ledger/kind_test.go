package ledger

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestValidateKindID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"standard", true}, {"limited_2026-12", true}, {"a", true}, {strings.Repeat("a", 64), true},
		{"", false}, {strings.Repeat("a", 65), false}, {"Limited", false}, {"a#b", false}, {"a b", false}, {"ポイント", false},
	} {
		if err := ValidateKindID(tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateKindID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

func TestNewKindChange(t *testing.T) {
	t.Parallel()
	p := func(n int32) *int32 { return &n }
	for _, tc := range []struct {
		name     string
		req      KindRequest
		reason   string // "" = valid
		priority int
	}{
		{"priority unset is 50", KindRequest{KindID: "shop"}, "", 50},
		{"priority 0", KindRequest{KindID: "shop", Priority: p(0)}, "", 0},
		{"priority 100", KindRequest{KindID: "shop", Priority: p(100)}, "", 100},
		{"priority 101", KindRequest{KindID: "shop", Priority: p(101)}, ReasonInvalidKind, 0},
		{"priority -1", KindRequest{KindID: "shop", Priority: p(-1)}, ReasonInvalidKind, 0},
		{"standard is built in", KindRequest{KindID: "standard"}, ReasonInvalidKind, 0},
		{"a bad id", KindRequest{KindID: "Shop"}, ReasonInvalidKind, 0},
		{"an empty merchant", KindRequest{KindID: "shop", Merchants: []string{""}}, ReasonInvalidMerchant, 0},
		{"a long category", KindRequest{KindID: "shop", Categories: []string{strings.Repeat("c", 65)}}, ReasonInvalidCategory, 0},
		{"no request id", KindRequest{KindID: "shop", RequestID: "-"}, ReasonInvalidRequestID, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			switch tc.req.RequestID {
			case "":
				tc.req.RequestID = "k1"
			case "-":
				tc.req.RequestID = ""
			}
			c, err := NewKindChange(tc.req)
			if ReasonOf(err) != tc.reason {
				t.Fatalf("NewKindChange = %v, want reason %q", err, tc.reason)
			}
			if err == nil && c.Kind.Priority != tc.priority {
				t.Errorf("priority = %d, want %d", c.Kind.Priority, tc.priority)
			}
		})
	}
	a, _ := NewKindChange(KindRequest{RequestID: "k", KindID: "shop", Merchants: []string{"b", "a", "b"}})
	b, _ := NewKindChange(KindRequest{RequestID: "k", KindID: "shop", Merchants: []string{"a", "b"}})
	if !slices.Equal(a.Kind.Merchants, []string{"a", "b"}) || a.Hash() != b.Hash() {
		t.Errorf("merchants %v (hash %s), want sorted without repeats and the same hash as %v (%s)", a.Kind.Merchants, a.Hash(), b.Kind.Merchants, b.Hash())
	}
}

func TestEligible(t *testing.T) {
	t.Parallel()
	storeOnly := PointKind{ID: "shop", Merchants: []string{"m1", "m2"}}
	food := PointKind{ID: "food", Categories: []string{"food"}}
	noExchange := PointKind{ID: "limited", ExcludedCategories: []string{"exchange"}}
	for _, tc := range []struct {
		kind               PointKind
		merchant, category string
		want               bool
	}{
		{Standard, "", "", true},
		{Standard, "m9", "exchange", true},
		{storeOnly, "m1", "", true},
		{storeOnly, "m2", "food", true},
		{storeOnly, "m3", "", false},
		{storeOnly, "", "", false}, // no merchant: only kinds without a merchant list
		{food, "m1", "food", true},
		{food, "m1", "books", false},
		{food, "m1", "", false}, // no category: only kinds without a category list
		{noExchange, "", "", true},
		{noExchange, "m1", "food", true},
		{noExchange, "m1", "exchange", false},
	} {
		if got := tc.kind.Eligible(tc.merchant, tc.category); got != tc.want {
			t.Errorf("%s.Eligible(%q, %q) = %v, want %v", KindName(tc.kind.ID), tc.merchant, tc.category, got, tc.want)
		}
	}
}

// programKinds is a program shaped like a Japanese one: standard points,
// limited-time campaign points spent first and barred from exchange,
// store-only points of two merchants.
var programKinds = NewKinds(
	PointKind{ID: "limited", Priority: 10, ExcludedCategories: []string{"exchange"}},
	PointKind{ID: "shop", Priority: 20, Merchants: []string{"m1", "m2"}},
	PointKind{ID: "promo", Priority: 90},
)

func TestSpendingOrder(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	b := func(kind string, expire time.Time) Bucket {
		return Bucket{Kind: kind, Expire: expire, Amount: decimal.NewFromInt(1)}
	}
	bs := []Bucket{
		b("", time.Time{}), b("", t0.Add(day)), b("promo", t0.Add(day)), b("shop", time.Time{}),
		b("limited", t0.Add(3*day)), b("limited", t0.Add(2*day)), b("other", t0.Add(day)),
	}
	got := programKinds.SpendingOrder(slices.Clone(bs))
	var names []string
	for _, x := range got {
		names = append(names, fmt.Sprintf("%s@%s", KindName(x.Kind), expiryText(x.Expire)))
	}
	// Priority, then soonest expiry (never last), then kind id; an unknown
	// kind ("other") has the default priority.
	want := []string{
		"limited@" + expiryText(t0.Add(2*day)), "limited@" + expiryText(t0.Add(3*day)), "shop@never",
		"other@" + expiryText(t0.Add(day)), "standard@" + expiryText(t0.Add(day)), "standard@never",
		"promo@" + expiryText(t0.Add(day)),
	}
	if !slices.Equal(names, want) {
		t.Errorf("spending order\n got %v\nwant %v", names, want)
	}
	// Eligible drops what the spend may not draw, and unknown kinds.
	var eligible []string
	for _, x := range programKinds.Eligible(bs, "m9", "exchange") {
		eligible = append(eligible, KindName(x.Kind))
	}
	if want := []string{"standard", "standard", "promo"}; !slices.Equal(eligible, want) {
		t.Errorf("eligible at m9 for exchange = %v, want %v", eligible, want)
	}
}

// kinded is a book of the program's kinds.
func kinded(tb testing.TB) (*book, Facts) {
	return newBook(tb), Facts{Kinds: programKinds}
}

func kindDraws(ds []Draw) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%s:%s", KindName(d.Kind), d.Amount))
	}
	return strings.Join(parts, " ")
}

func TestPurchasesSpendEligibleKindsInOrder(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		name               string
		merchant, category string
		amount             string
		draws              string // "" = refused INSUFFICIENT_BALANCE
		spendable          string // with a refusal
	}{
		{"limited first, then store-only, then standard", "m1", "food", "35", "limited:10 shop:20 standard:5", ""},
		{"elsewhere, the store-only points are not spent", "m9", "food", "15", "limited:10 standard:5", ""},
		{"no merchant: no store-only points", "", "", "55", "", "50"},
		{"exchange takes no limited points", "m1", "exchange", "25", "shop:20 standard:5", ""},
		{"short at a merchant that takes less", "m9", "exchange", "41", "", "40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, f := kinded(t)
			b.must(t0, EntryGrant, Request{Amount: "40"}, f)
			b.must(t0, EntryGrant, Request{Amount: "20", Kind: "shop"}, f)
			b.must(t0, EntryGrant, Request{Amount: "10", Kind: "limited", Expire: t0.Add(3 * day)}, f)
			d, err := b.do(t0.Add(time.Hour), EntryPurchase, Request{Amount: tc.amount, MerchantID: tc.merchant, Category: tc.category}, f)
			if tc.draws == "" {
				e, ok := AsError(err)
				if !ok || e.Reason != ReasonInsufficientBalance || e.Metadata[MetadataSpendable] != tc.spendable {
					t.Fatalf("purchase = %v, want INSUFFICIENT_BALANCE with spendable %s", err, tc.spendable)
				}
				if !strings.Contains(e.Message, whereText(tc.merchant, tc.category)) {
					t.Errorf("message %q names neither merchant nor category", e.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := kindDraws(d.Entry().Draws); got != tc.draws {
				t.Errorf("draws %s, want %s", got, tc.draws)
			}
			if e := d.Entry(); e.MerchantID != tc.merchant || e.Category != tc.category {
				t.Errorf("entry spent at %q in %q, want %q, %q", e.MerchantID, e.Category, tc.merchant, tc.category)
			}
			if _, findings := Audit(Partition{Account: b.acct, Entries: b.entries, Kinds: programKinds}, time.Time{}); hasFinding(findings, FindingIneligibleDraw) {
				t.Errorf("audit: %v", findings)
			}
		})
	}
}

func hasFinding(fs []Finding, kind string) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Kind == kind })
}

func TestAnUnknownKindIsRefusedForGood(t *testing.T) {
	t.Parallel()
	b, f := kinded(t)
	_, err := b.do(t0, EntryGrant, Request{Amount: "1", Kind: "nosuch"}, f)
	if e, ok := AsError(err); !ok || e.Reason != ReasonKindNotFound || !e.Kind.Final() {
		t.Fatalf("grant of an unknown kind = %v, want a final KIND_NOT_FOUND", err)
	}
	if _, err := b.do(t0, EntryGrant, Request{Amount: "1", Kind: "standard"}, f); err != nil {
		t.Errorf("a grant of kind standard: %v", err)
	}
	if b.entries[0].Kind != "" {
		t.Errorf("a standard grant's entry has kind %q, want none", b.entries[0].Kind)
	}
	if _, err := b.do(t0, EntryGrant, Request{Amount: "1", Kind: "limited"}, Facts{}); ReasonOf(err) != ReasonKindNotFound {
		t.Errorf("a grant of a kind the facts do not know = %v, want KIND_NOT_FOUND", err)
	}
	m := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "x", Amount: "1", Kind: "limited"})
	if got := (Kinds{}).Missing(b.acct, m); !slices.Equal(got, []string{"limited"}) {
		t.Errorf("Missing = %v, want [limited]", got)
	}
}

func TestKindsOnlyOnCreditsAndWhereOnlyOnSpends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ EntryType
		req Request
	}{
		{EntryPurchase, Request{Amount: "1", Kind: "limited"}},
		{EntryAdjustment, Request{Amount: "1", Kind: "limited", Debit: true, Reason: "r"}},
		{EntryGrant, Request{Amount: "1", MerchantID: "m1"}},
		{EntryRefund, Request{Amount: "1", PurchaseRequestID: "p", Category: "food"}},
		{EntryGrant, Request{Amount: "1", Kind: "Limited"}},
		{EntryPurchase, Request{Amount: "1", MerchantID: strings.Repeat("m", 65)}},
	} {
		tc.req.UserID, tc.req.RequestID = "u", "r"
		if _, err := NewMutation(tc.typ, tc.req, DefaultScale); err == nil {
			t.Errorf("%s %+v accepted", tc.typ, tc.req)
		}
	}
	// A standard credit hashes as it did before kinds; a kind changes it.
	plain := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "r", Amount: "1"})
	standard := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "r", Amount: "1", Kind: "standard"})
	limited := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "r", Amount: "1", Kind: "limited"})
	if plain.Hash() != standard.Hash() || plain.Hash() == limited.Hash() {
		t.Error("hashes: a standard grant must hash as one naming no kind, and another kind otherwise")
	}
}

func TestRefundsCapturesAndVoidsKeepKindsExact(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	b, f := kinded(t)
	b.must(t0, EntryGrant, Request{Amount: "40"}, f)
	b.must(t0, EntryGrant, Request{Amount: "20", Kind: "shop"}, f)
	b.must(t0, EntryGrant, Request{Amount: "10", Kind: "limited", Expire: t0.Add(3 * day)}, f)
	p := b.must(t0, EntryPurchase, Request{Amount: "35", MerchantID: "m1"}, f)
	// A refund gives back last drawn first, to exactly the drawn buckets.
	f1 := f
	f1.Purchase = purchaseRef(p, "0")
	r := b.must(t0, EntryRefund, Request{Amount: "8", PurchaseRequestID: p.Entry().RequestID}, f1)
	if got := kindDraws(r.Entry().Draws); got != "standard:5 shop:3" {
		t.Errorf("refund draws %s, want standard:5 shop:3", got)
	}
	f2 := f
	f2.Purchase = purchaseRef(p, "8")
	r = b.must(t0, EntryRefund, Request{Amount: "27", PurchaseRequestID: p.Entry().RequestID}, f2)
	if got := kindDraws(r.Entry().Draws); got != "shop:17 limited:10" {
		t.Errorf("refund draws %s, want shop:17 limited:10", got)
	}
	if got := kindBalances(b.acct, f.Kinds); got != "limited:10 shop:20 standard:40" {
		t.Errorf("after the refunds: %s, want all back where it was", got)
	}
	// A hold at m2 takes limited and store-only points; a capture spends
	// what it drew, in its order, and gives back the rest to the same
	// buckets.
	h := b.must(t0, EntryHold, Request{Amount: "25", MerchantID: "m2", Expire: t0.Add(day)}, f)
	if got := kindDraws(h.Entry().Draws); got != "limited:10 shop:15" {
		t.Fatalf("hold draws %s", got)
	}
	c := b.must(t0, EntryCapture, Request{Amount: "12", HoldRequestID: h.Entry().RequestID}, f)
	if got := kindDraws(c.Entry().Draws); got != "limited:10 shop:2" || c.Entry().MerchantID != "m2" {
		t.Errorf("capture draws %s at %q, want limited:10 shop:2 at m2", got, c.Entry().MerchantID)
	}
	if got := kindBalances(b.acct, f.Kinds); got != "shop:18 standard:40" {
		t.Errorf("after the capture: %s", got)
	}
	h = b.must(t0, EntryHold, Request{Amount: "30", MerchantID: "m1", Expire: t0.Add(day)}, f)
	b.must(t0, EntryRelease, Request{HoldRequestID: h.Entry().RequestID}, f)
	if got := kindBalances(b.acct, f.Kinds); got != "shop:18 standard:40" {
		t.Errorf("after a void: %s", got)
	}
	if _, findings := Audit(Partition{Account: b.acct, Entries: b.entries, Kinds: programKinds}, time.Time{}); hasFinding(findings, FindingIneligibleDraw) || hasFinding(findings, FindingBuckets) {
		t.Errorf("audit: %v", findings)
	}
}

// kindBalances is each kind's balance, in spending order.
func kindBalances(a Account, ks Kinds) string {
	var parts []string
	for _, kb := range a.KindBalances(a.UpdateTime, ks) {
		parts = append(parts, fmt.Sprintf("%s:%s", KindName(kb.Kind), kb.Balance))
	}
	return strings.Join(parts, " ")
}

func TestExpirationsAndMaturationsNameKinds(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	b, f := kinded(t)
	b.must(t0, EntryGrant, Request{Amount: "10", Kind: "limited", Expire: t0.Add(day)}, f)
	b.must(t0, EntryGrant, Request{Amount: "5", Expire: t0.Add(day)}, f)
	b.must(t0, EntryGrant, Request{Amount: "7", Kind: "promo", Effective: t0.Add(day / 2), Expire: t0.Add(2 * day)}, f)
	d := DecideExpiry(b.acct, t0.Add(day))
	var got []string
	for _, e := range d.Entries {
		got = append(got, fmt.Sprintf("%s %s %s", e.Type, KindName(e.Kind), kindDraws(e.Draws)))
	}
	want := []string{"MATURATION promo ", "EXPIRATION standard standard:5 limited:10"}
	if !slices.Equal(got, want) {
		t.Errorf("due entries %q, want %q", got, want)
	}
	if got := kindBalances(d.After, f.Kinds); got != "promo:7" {
		t.Errorf("after: %s, want promo:7", got)
	}
}

func TestAReversalTakesOnlyItsGrantsKind(t *testing.T) {
	t.Parallel()
	b, f := kinded(t)
	b.must(t0, EntryGrant, Request{Amount: "50"}, f)
	g := b.must(t0, EntryGrant, Request{Amount: "10", Kind: "shop"}, f)
	b.must(t0, EntryPurchase, Request{Amount: "6", MerchantID: "m1"}, f) // takes 6 of the shop points
	grant := &GrantRef{Version: g.Entry().Version, Type: EntryGrant, Amount: d("10"), Kind: "shop"}
	fr := f
	fr.Grant = grant
	if _, err := b.do(t0, EntryReversal, Request{Amount: "5", GrantRequestID: g.Entry().RequestID}, fr); ReasonOf(err) != ReasonInsufficientBalance {
		t.Fatalf("reversal of 5 with 4 shop points left = %v, want INSUFFICIENT_BALANCE though standard points abound", err)
	}
	r := b.must(t0, EntryReversal, Request{Amount: "4", GrantRequestID: g.Entry().RequestID}, fr)
	if got := kindDraws(r.Entry().Draws); got != "shop:4" {
		t.Errorf("reversal draws %s, want shop:4", got)
	}
}

func TestKindsShareTheBucketBound(t *testing.T) {
	t.Parallel()
	b, f := kinded(t)
	f.MaxBuckets = 2
	b.must(t0, EntryGrant, Request{Amount: "1"}, f)
	b.must(t0, EntryGrant, Request{Amount: "1", Kind: "shop"}, f)
	if _, err := b.do(t0, EntryGrant, Request{Amount: "1", Kind: "limited"}, f); ReasonOf(err) != ReasonTooManyBuckets {
		t.Errorf("a third (kind, expiry) of two allowed = %v, want TOO_MANY_BUCKETS", err)
	}
	b.must(t0, EntryGrant, Request{Amount: "1", Kind: "shop"}, f) // an existing bucket
}

func TestSpendableAndKindBalances(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	b, f := kinded(t)
	b.must(t0, EntryGrant, Request{Amount: "40"}, f)
	b.must(t0, EntryGrant, Request{Amount: "20", Kind: "shop"}, f)
	b.must(t0, EntryGrant, Request{Amount: "10", Kind: "limited", Expire: t0.Add(day)}, f)
	b.must(t0, EntryHold, Request{Amount: "12", MerchantID: "m1", Expire: t0.Add(day)}, f)
	for _, tc := range []struct{ merchant, category, want string }{
		{"", "", "40"}, {"m1", "", "58"}, {"m9", "", "40"}, {"m1", "exchange", "58"},
	} {
		if got := b.acct.SpendableAt(t0, f.Kinds, tc.merchant, tc.category); got.String() != tc.want {
			t.Errorf("spendable at %q in %q = %s, want %s", tc.merchant, tc.category, got, tc.want)
		}
	}
	kbs := b.acct.KindBalances(t0, f.Kinds)
	var got []string
	for _, kb := range kbs {
		got = append(got, fmt.Sprintf("%s %s/%s/%s", KindName(kb.Kind), kb.Balance, kb.Available, kb.Held))
	}
	if want := []string{"limited 10/0/10", "shop 20/18/2", "standard 40/40/0"}; !slices.Equal(got, want) {
		t.Errorf("kind balances %v, want %v", got, want)
	}
	// At the limited points' expiry, they go, the held ones too, as the
	// hold lets go at once.
	if got := b.acct.SpendableAt(t0.Add(day), f.Kinds, "m1", ""); got.String() != "60" {
		t.Errorf("spendable at m1 a day later = %s, want 60", got)
	}
}

func TestTheAuditFindsAnIneligibleDraw(t *testing.T) {
	t.Parallel()
	b, f := kinded(t)
	b.must(t0, EntryGrant, Request{Amount: "20", Kind: "shop"}, f)
	b.must(t0.Add(2*MaxKindRefresh), EntryPurchase, Request{Amount: "5", MerchantID: "m1"}, f)
	// The same purchase written as if spent at m9: damage the audit sees.
	b.entries[1].MerchantID = "m9"
	if _, findings := Audit(Partition{Account: b.acct, Entries: b.entries, Kinds: programKinds}, time.Time{}); !hasFinding(findings, FindingIneligibleDraw) {
		t.Errorf("audit found %v, want an ineligible draw", findings)
	}
	// A kind changed after the spend: decided under rules the ledger does
	// not keep, so not checked.
	changed := NewKinds(PointKind{ID: "shop", Merchants: []string{"m1"}, UpdateTime: t0.Add(2 * MaxKindRefresh)})
	if _, findings := Audit(Partition{Account: b.acct, Entries: b.entries, Kinds: changed}, time.Time{}); hasFinding(findings, FindingIneligibleDraw) {
		t.Errorf("audit found %v after the kind changed", findings)
	}
}
