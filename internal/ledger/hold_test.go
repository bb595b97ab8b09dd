package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// holds is what a store keeps of holds beside the account: each hold's
// state by its request_id, as the entries resolved it.
type holds map[string]HoldState

// record notes what d's entries did to holds.
func (hs holds) record(d Decision) {
	for _, e := range d.Entries {
		switch e.Type {
		case EntryHold:
			hs[e.RequestID] = HoldHeld
		case EntryCapture, EntryRelease:
			hs[e.HoldRequestID] = ResolvedHold(Hold{}, e).State
		case EntryGrant, EntryPurchase, EntryRefund, EntryAdjustment, EntryExpiration, EntryMaturation, EntryReversal:
		}
	}
}

// facts are the facts a store gives a capture or a void of hold id.
func (hs holds) facts(id string) Facts {
	if st, ok := hs[id]; ok {
		return Facts{Hold: &HoldRef{State: st}}
	}
	return Facts{}
}

// hold authorizes amount until expire at t, and returns the hold's id.
func (b *book) hold(t time.Time, amount string, expire time.Time) string {
	b.tb.Helper()
	return b.must(t, EntryHold, Request{Amount: amount, Expire: expire}, Facts{}).Entry().RequestID
}

// holdStep is one call after a hold is authorized.
type holdStep struct {
	at     time.Time
	typ    EntryType
	req    Request // HoldRequestID "": the hold authorized first
	reason string  // "" = decided
}

// holdTransition is a grant of 100 expiring later, a hold of 40 expiring
// soon, then steps; after them, the balance, held and the hold's state.
type holdTransition struct {
	name          string
	frozen        bool
	steps         []holdStep
	balance, held string
	state         HoldState
}

func TestHoldTransitions(t *testing.T) {
	t.Parallel()
	soon, later := t0.Add(time.Hour), t0.Add(48*time.Hour)
	type step = holdStep
	tests := []holdTransition{
		{name: "authorize holds without moving the balance",
			balance: "100", held: "40", state: HoldHeld},
		{name: "capture spends all of the hold", steps: []step{
			{t0.Add(time.Minute), EntryCapture, Request{}, ""},
		}, balance: "60", held: "0", state: HoldCaptured},
		{name: "a smaller capture releases the rest", steps: []step{
			{t0.Add(time.Minute), EntryCapture, Request{Amount: "25"}, ""},
		}, balance: "75", held: "0", state: HoldCaptured},
		{name: "a capture over the hold is refused", steps: []step{
			{t0.Add(time.Minute), EntryCapture, Request{Amount: "40.01"}, ReasonCaptureExceedsHold},
		}, balance: "100", held: "40", state: HoldHeld},
		{name: "void gives all back", steps: []step{
			{t0.Add(time.Minute), EntryRelease, Request{}, ""},
		}, balance: "100", held: "0", state: HoldVoided},
		{name: "a hold resolves once: capture then void", steps: []step{
			{t0.Add(time.Minute), EntryCapture, Request{}, ""},
			{t0.Add(2 * time.Minute), EntryRelease, Request{}, ReasonHoldNotHeld},
			{t0.Add(2 * time.Minute), EntryCapture, Request{}, ReasonHoldNotHeld},
		}, balance: "60", held: "0", state: HoldCaptured},
		{name: "a hold resolves once: void then capture", steps: []step{
			{t0.Add(time.Minute), EntryRelease, Request{}, ""},
			{t0.Add(2 * time.Minute), EntryCapture, Request{}, ReasonHoldNotHeld},
		}, balance: "100", held: "0", state: HoldVoided},
		{name: "capture a microsecond before the expiry", steps: []step{
			{soon.Add(-time.Microsecond), EntryCapture, Request{}, ""},
		}, balance: "60", held: "0", state: HoldCaptured},
		{name: "capture at exactly the expiry is refused", steps: []step{
			{soon, EntryCapture, Request{}, ReasonHoldExpired},
		}, balance: "100", held: "40", state: HoldHeld}, // refused: nothing written, not even the release
		{name: "an expired hold is released by the next mutation, and stays refused", steps: []step{
			{soon, EntryGrant, Request{Amount: "1"}, ""},
			{soon, EntryCapture, Request{}, ReasonHoldExpired},
			{soon, EntryRelease, Request{}, ReasonHoldExpired},
		}, balance: "101", held: "0", state: HoldExpired},
		{name: "an unknown hold", steps: []step{
			{t0, EntryCapture, Request{HoldRequestID: "nope"}, ReasonHoldNotFound},
			{t0, EntryRelease, Request{HoldRequestID: "nope"}, ReasonHoldNotFound},
		}, balance: "100", held: "40", state: HoldHeld},
		{name: "a hold over what is available", steps: []step{
			{t0, EntryHold, Request{Amount: "60.01", Expire: soon}, ReasonInsufficientBalance},
			{t0, EntryPurchase, Request{Amount: "60.01"}, ReasonInsufficientBalance},
			{t0, EntryAdjustment, Request{Amount: "60.01", Debit: true, Reason: "r"}, ReasonInsufficientBalance},
			{t0, EntryPurchase, Request{Amount: "60"}, ""},
		}, balance: "40", held: "40", state: HoldHeld},
		{name: "a hold that would expire before it is made", steps: []step{
			{t0, EntryHold, Request{Amount: "1", Expire: t0}, ReasonInvalidExpiry},
		}, balance: "100", held: "40", state: HoldHeld},
		{name: "frozen: no new hold nor purchase, but capture", frozen: true, steps: []step{
			{t0, EntryHold, Request{Amount: "1", Expire: soon}, ReasonAccountFrozen},
			{t0, EntryPurchase, Request{Amount: "1"}, ReasonAccountFrozen},
			{t0, EntryCapture, Request{Amount: "10"}, ""},
		}, balance: "90", held: "0", state: HoldCaptured},
		{name: "frozen: void", frozen: true, steps: []step{
			{t0, EntryRelease, Request{}, ""},
		}, balance: "100", held: "0", state: HoldVoided},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runHoldTransition(t, tc, soon, later)
		})
	}
}

// runHoldTransition authorizes the hold, takes tc's steps and checks where
// they lead.
func runHoldTransition(t *testing.T, tc holdTransition, soon, later time.Time) {
	t.Helper()
	b, hs := newBook(t), holds{}
	hs.record(b.must(t0, EntryGrant, Request{Amount: "100", Expire: later}, Facts{}))
	h := b.must(t0, EntryHold, Request{Amount: "40", Expire: soon, OrderID: "order-1"}, Facts{})
	hs.record(h)
	id := h.Entry().RequestID
	if e := h.Entry(); !e.Amount.IsZero() || !e.HeldChange.Equal(d("40")) || !e.HeldAfter.Equal(d("40")) || !e.ExpireTime.Equal(soon) ||
		!sameDraws(e.Draws, draws(later, "40")) {
		t.Fatalf("hold entry = %+v", e)
	}
	if tc.frozen {
		b.acct.Status = StatusFrozen
	}
	for i, s := range tc.steps {
		if s.req.HoldRequestID == "" && (s.typ == EntryCapture || s.typ == EntryRelease) {
			s.req.HoldRequestID = id
		}
		dec, err := b.do(s.at, s.typ, s.req, hs.facts(s.req.HoldRequestID))
		if got := ReasonOf(err); got != s.reason || (err == nil) != (s.reason == "") {
			t.Fatalf("step %d (%s): %v, want %q", i, s.typ, err, s.reason)
		}
		if err == nil {
			hs.record(dec)
		}
	}
	if !b.acct.Balance.Equal(d(tc.balance)) || !b.acct.Held.Equal(d(tc.held)) || hs[id] != tc.state {
		t.Errorf("balance %s held %s, hold %s; want %s, %s, %s", b.acct.Balance, b.acct.Held, hs[id], tc.balance, tc.held, tc.state)
	}
	assertHoldsSum(t, b)
}

// assertHoldsSum checks the account's own sums: held is the sum of the open
// holds, the balance is the buckets and what is held, and the account is the
// fold of the entries.
func assertHoldsSum(t *testing.T, b *book) {
	t.Helper()
	held, buckets := decimal.Zero, decimal.Zero
	for _, h := range b.acct.Holds {
		held = held.Add(h.Amount)
	}
	for _, bk := range b.acct.Buckets {
		buckets = buckets.Add(bk.Amount)
	}
	if !held.Equal(b.acct.Held) || !buckets.Add(held).Equal(b.acct.Balance) || b.acct.Available().IsNegative() {
		t.Fatalf("account %+v: open holds sum to %s, buckets to %s", b.acct, held, buckets)
	}
	folded, _, err := Fold("u", b.entries)
	if err != nil {
		t.Fatal(err)
	}
	if folded.Version != b.acct.Version || !folded.Balance.Equal(b.acct.Balance) || !folded.Held.Equal(b.acct.Held) ||
		len(folded.Holds) != len(b.acct.Holds) || !slices.EqualFunc(folded.Buckets, b.acct.Buckets, func(x, y Bucket) bool { return x.Expire.Equal(y.Expire) && x.Amount.Equal(y.Amount) }) {
		t.Fatalf("decided %+v, fold %+v", b.acct, folded)
	}
}

// A hold draws soonest expiry first, as a purchase would; a partial capture
// spends the hold's soonest points and gives the rest back where it came from.
func TestAHoldDrawsAsAPurchaseWould(t *testing.T) {
	t.Parallel()
	e1, e2 := t0.Add(time.Hour), t0.Add(2*time.Hour)
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "5"}, Facts{})
	b.must(t0, EntryGrant, Request{Amount: "10", Expire: e2}, Facts{})
	b.must(t0, EntryGrant, Request{Amount: "10", Expire: e1}, Facts{})
	id := b.hold(t0, "18", e2)
	if h, _ := b.acct.Hold(id); !sameDraws(h.Draws, draws(e1, "10", e2, "8")) {
		t.Fatalf("hold drew %+v, want 10 of %s then 8 of %s", h.Draws, e1, e2)
	}
	c := b.must(t0, EntryCapture, Request{Amount: "12", HoldRequestID: id}, Facts{}).Entry()
	if !sameDraws(c.Draws, draws(e1, "10", e2, "2")) || !c.Amount.Equal(d("-12")) || !c.HeldChange.Equal(d("-18")) {
		t.Errorf("capture = %+v, want 10 of %s and 2 of %s", c, e1, e2)
	}
	want := []Bucket{{Expire: e2, Amount: d("8")}, {Amount: d("5")}}
	if !slices.EqualFunc(b.acct.Buckets, want, func(x, y Bucket) bool { return x.Expire.Equal(y.Expire) && x.Amount.Equal(y.Amount) }) {
		t.Errorf("buckets after = %+v, want %+v", b.acct.Buckets, want)
	}
	assertHoldsSum(t, b)
}

// Held points whose bucket expires during the hold are spent if captured,
// and expire at once if the hold is voided or expires.
func TestHeldPointsWhoseBucketExpires(t *testing.T) {
	t.Parallel()
	bucketExpiry, holdExpiry := t0.Add(time.Hour), t0.Add(3*time.Hour)
	during := t0.Add(2 * time.Hour)
	setup := func(t *testing.T) (*book, string) {
		b := newBook(t)
		b.must(t0, EntryGrant, Request{Amount: "10", Expire: bucketExpiry}, Facts{})
		b.must(t0, EntryGrant, Request{Amount: "3"}, Facts{})
		return b, b.hold(t0, "8", holdExpiry)
	}
	t.Run("a balance read during the hold counts them held", func(t *testing.T) {
		b, _ := setup(t)
		at := b.acct.At(during)
		if !at.Balance.Equal(d("11")) || !at.Held.Equal(d("8")) || !at.Available().Equal(d("3")) {
			t.Errorf("at %s: balance %s held %s available %s; want 11 (2 expired), 8, 3", during, at.Balance, at.Held, at.Available())
		}
	})
	t.Run("captured", func(t *testing.T) {
		b, id := setup(t)
		dec := b.must(during, EntryCapture, Request{HoldRequestID: id}, Facts{})
		if len(dec.Entries) != 2 || dec.Entries[0].Type != EntryExpiration || !dec.Entries[0].Amount.Equal(d("-2")) {
			t.Fatalf("entries = %+v, want the expiration of the 2 not held, then the capture", dec.Entries)
		}
		if c := dec.Entry(); !c.Amount.Equal(d("-8")) || !sameDraws(c.Draws, draws(bucketExpiry, "8")) {
			t.Errorf("capture = %+v, want 8 spent from the expired bucket", c)
		}
		if !b.acct.Balance.Equal(d("3")) {
			t.Errorf("balance = %s, want 3", b.acct.Balance)
		}
		assertHoldsSum(t, b)
	})
	t.Run("voided", func(t *testing.T) {
		b, id := setup(t)
		dec := b.must(during, EntryRelease, Request{HoldRequestID: id}, Facts{})
		last := dec.Entries[len(dec.Entries)-1]
		if dec.Entry().Reason != ReleaseVoided || last.Type != EntryExpiration || !last.Amount.Equal(d("-8")) {
			t.Fatalf("entries = %+v, want the release, then the expiration of the 8 it gave back", dec.Entries)
		}
		if dec.Entry().System() {
			t.Errorf("a void, asked for by a request, is System()")
		}
		if !b.acct.Balance.Equal(d("3")) || !b.acct.Held.IsZero() {
			t.Errorf("balance %s held %s, want 3 and 0", b.acct.Balance, b.acct.Held)
		}
		assertHoldsSum(t, b)
	})
	t.Run("expired", func(t *testing.T) {
		b, id := setup(t)
		dec := DecideExpiry(b.acct, holdExpiry)
		var got []string
		for _, e := range dec.Entries {
			got = append(got, fmt.Sprintf("%s %s %s %s", e.Type, e.Amount, e.HeldChange, e.Reason))
		}
		want := []string{"RELEASE 0 -8 EXPIRED", "EXPIRATION -10 0 "}
		if fmt.Sprint(got) != fmt.Sprint(want) || dec.Entries[0].HoldRequestID != id {
			t.Fatalf("the sweeper's entries = %q, want %q", got, want)
		}
		for _, e := range dec.Entries {
			if !e.System() || e.RequestID != "" {
				t.Errorf("%s %s: the ledger's own entry, with no request_id: System() = %v, request_id %q", e.Type, e.Reason, e.System(), e.RequestID)
			}
		}
		b.entries, b.acct = append(b.entries, dec.Entries...), dec.After
		if !b.acct.Balance.Equal(d("3")) || len(b.acct.Holds) != 0 || !b.acct.NextDue().IsZero() {
			t.Errorf("after = %+v, want 3 left, no hold, nothing to expire", b.acct)
		}
		assertHoldsSum(t, b)
	})
}

// The next expiry a sweeper is told of is the sooner of a bucket's and a
// hold's.
func TestNextDueCountsHolds(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(5 * time.Hour)}, Facts{})
	b.hold(t0, "1", t0.Add(time.Hour))
	if got := b.acct.NextDue(); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("next expiry = %s, want the hold's", got)
	}
}

// A capture refunds like a purchase: back to the buckets it spent, and what
// lands in an expired bucket expires at once.
func TestACaptureRefundsLikeAPurchase(t *testing.T) {
	t.Parallel()
	e1 := t0.Add(time.Hour)
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "10", Expire: e1}, Facts{})
	b.must(t0, EntryGrant, Request{Amount: "10"}, Facts{})
	id := b.hold(t0, "15", e1)
	c := b.must(t0, EntryCapture, Request{HoldRequestID: id}, Facts{})
	ref := purchaseRef(c, "0")
	r := b.must(t0.Add(2*time.Hour), EntryRefund, Request{Amount: "15", PurchaseRequestID: c.Entry().RequestID}, Facts{Purchase: ref})
	last := r.Entries[len(r.Entries)-1]
	if !sameDraws(r.Entry().Draws, draws(time.Time{}, "5", e1, "10")) || last.Type != EntryExpiration || !last.Amount.Equal(d("-10")) {
		t.Errorf("refund entries = %+v", r.Entries)
	}
	if !b.acct.Balance.Equal(d("10")) {
		t.Errorf("balance = %s, want 10", b.acct.Balance)
	}
	assertHoldsSum(t, b)
	if _, err := b.do(t0, EntryRefund, Request{Amount: "1", PurchaseRequestID: id}, Facts{Purchase: &PurchaseRef{Type: EntryHold, Amount: d("15")}}); ReasonOf(err) != ReasonPurchaseNotFound {
		t.Errorf("a refund naming the hold: %v, want %s", err, ReasonPurchaseNotFound)
	}
}

func TestTooManyHolds(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "10"}, Facts{})
	for range 3 {
		b.must(t0, EntryHold, Request{Amount: "1", Expire: t0.Add(time.Hour)}, Facts{MaxHolds: 3})
	}
	if _, err := b.do(t0, EntryHold, Request{Amount: "1", Expire: t0.Add(time.Hour)}, Facts{MaxHolds: 3}); ReasonOf(err) != ReasonTooManyHolds {
		t.Errorf("a fourth hold of 3 allowed: %v, want %s", err, ReasonTooManyHolds)
	}
}

// Capture, void and the hold's expiry race: whatever order they are decided
// in, exactly one resolves the hold, and the others are refused.
func TestCaptureVoidAndExpiryRace(t *testing.T) {
	t.Parallel()
	expiry := t0.Add(time.Hour)
	ops := []string{"capture", "void", "expire"}
	for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		name := fmt.Sprint(ops[order[0]], ", ", ops[order[1]], ", ", ops[order[2]])
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, hs := newBook(t), holds{}
			b.must(t0, EntryGrant, Request{Amount: "10"}, Facts{})
			id := b.hold(t0, "10", expiry)
			hs[id] = HoldHeld
			now := t0.Add(time.Minute)
			won := 0
			for _, op := range order {
				var dec Decision
				var err error
				switch ops[op] {
				case "capture":
					dec, err = b.do(now, EntryCapture, Request{HoldRequestID: id}, hs.facts(id))
				case "void":
					dec, err = b.do(now, EntryRelease, Request{HoldRequestID: id}, hs.facts(id))
				case "expire":
					now = expiry
					dec = DecideExpiry(b.acct, now)
					b.entries, b.acct = append(b.entries, dec.Entries...), dec.After
				}
				if r := ReasonOf(err); err != nil && r != ReasonHoldNotHeld && r != ReasonHoldExpired {
					t.Fatalf("%s: %v", ops[op], err)
				}
				hs.record(dec)
				for _, e := range dec.Entries {
					if e.HoldRequestID == id {
						won++
					}
				}
			}
			if won != 1 || !b.acct.Held.IsZero() {
				t.Errorf("%d entries resolved the hold, held %s; want exactly 1 and 0", won, b.acct.Held)
			}
			assertHoldsSum(t, b)
		})
	}
}

// Random holds, captures, voids, purchases and grants at random times:
// whatever happens, the account is the fold of its entries, held is the sum
// of the open holds, what is available is never negative, each hold
// resolves at most once and a capture never exceeds its hold.
func TestHoldsKeepTheAccountsSums(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 2))
		b, hs := newBook(t), holds{}
		now := t0
		var ids []string
		resolved := map[string]int{}
		for range 60 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Minute)
			amount := decimal.New(int64(1+rng.IntN(2000)), -2)
			var dec Decision
			var err error
			switch k := rng.IntN(6); {
			case k == 0:
				r := Request{Amount: amount.String()}
				if rng.IntN(2) > 0 {
					r.Expire = now.Add(time.Duration(1+rng.IntN(5)) * time.Hour)
				}
				dec, err = b.do(now, EntryGrant, r, Facts{MaxBuckets: 6})
			case k == 1:
				dec, err = b.do(now, EntryPurchase, Request{Amount: amount.String()}, Facts{})
			case k == 2:
				dec, err = b.do(now, EntryHold, Request{Amount: amount.String(), Expire: now.Add(time.Duration(1+rng.IntN(180)) * time.Minute)}, Facts{MaxHolds: 4})
				if err == nil {
					ids = append(ids, dec.Entry().RequestID)
				}
			case (k == 3 || k == 4) && len(ids) > 0:
				id := ids[rng.IntN(len(ids))]
				r := Request{HoldRequestID: id}
				typ := EntryRelease
				if k == 3 {
					typ = EntryCapture
					if rng.IntN(2) == 0 {
						r.Amount = amount.String()
					}
				}
				dec, err = b.do(now, typ, r, hs.facts(id))
			default:
				dec = DecideExpiry(b.acct, now)
				b.entries, b.acct = append(b.entries, dec.Entries...), dec.After
			}
			if e, ok := AsError(err); err != nil && (!ok || !e.Kind.Final()) {
				t.Fatalf("seed %d: %v", seed, err)
			}
			hs.record(dec)
			for _, e := range dec.Entries {
				if e.HoldRequestID != "" {
					resolved[e.HoldRequestID]++
				}
				if e.Type == EntryCapture && e.Amount.Neg().GreaterThan(e.HeldChange.Neg()) {
					t.Fatalf("seed %d: capture %+v exceeds its hold", seed, e)
				}
			}
			assertHoldsSum(t, b)
		}
		for id, n := range resolved {
			if n > 1 {
				t.Fatalf("seed %d: hold %s resolved %d times", seed, id, n)
			}
		}
	}
}

// A store that writes a bounded number of entries at once releases many
// holds due together in parts, and ends where one expiry would: the
// buckets expire once the last hold due is released.
func TestExpiryInParts(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	b.must(t0, EntryGrant, Request{Amount: "100", Expire: t0.Add(time.Hour)}, Facts{})
	b.must(t0, EntryGrant, Request{Amount: "7"}, Facts{})
	for i := range 5 {
		b.hold(t0, "5", t0.Add(time.Duration(10+i)*time.Minute))
	}
	b.hold(t0, "3", t0.Add(3*time.Hour)) // not due
	at := t0.Add(2 * time.Hour)
	whole := DecideExpiry(b.acct, at)
	if none := DecideExpiryUpTo(b.acct, at, 0); len(none.Entries) != 0 || none.After.Version != b.acct.Version {
		t.Fatalf("at most 0 releases: %+v, want nothing", none.Entries)
	}
	var parts []int
	for {
		d := DecideExpiryUpTo(b.acct, at, 2)
		if len(d.Entries) == 0 {
			break
		}
		for _, e := range d.Entries[:len(d.Entries)-1] {
			if e.Type == EntryExpiration {
				t.Fatalf("part %d: an EXPIRATION before its last entry: %+v", len(parts), d.Entries)
			}
		}
		parts = append(parts, len(d.Entries))
		b.entries, b.acct = append(b.entries, d.Entries...), d.After
		assertHoldsSum(t, b)
	}
	if fmt.Sprint(parts) != "[2 2 2]" { // releases 2, 2, then 1 and the EXPIRATION of the buckets
		t.Errorf("parts of %v entries, want [2 2 2]", parts)
	}
	if last := b.entries[len(b.entries)-1]; last.Type != EntryExpiration || !last.Amount.Equal(d("-97")) {
		t.Errorf("last entry %+v, want the EXPIRATION of 97 (3 of the bucket stay held)", last)
	}
	if w := whole.After; w.Version != b.acct.Version || !w.Balance.Equal(b.acct.Balance) || !w.Held.Equal(b.acct.Held) || len(w.Holds) != 1 || len(b.acct.Holds) != 1 {
		t.Errorf("in parts %+v, at once %+v", b.acct, w)
	}
}
