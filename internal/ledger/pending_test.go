package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// grants keeps what a store keeps of a book's grants for a reversal's
// facts: each grant's entry, with the reversals so far in its
// ReversedAmount, and the request records of the book's calls, for Audit.
type grants struct {
	b        *book
	requests map[string]RequestRecord
}

func newGrants(b *book) *grants { return &grants{b: b, requests: map[string]RequestRecord{}} }

// do is book.do that also writes what a store writes beside the entries:
// the request's record (its refusal, if final) and a reversal's count on
// its grant.
func (g *grants) do(t time.Time, typ EntryType, r Request, f Facts) (Decision, error) {
	g.b.tb.Helper()
	if typ == EntryReversal {
		f.Grant = g.ref(r.GrantRequestID)
	}
	d, err := g.b.do(t, typ, r, f)
	id := fmt.Sprint("r", g.b.n)
	m, _ := NewMutation(typ, Request{UserID: "u", RequestID: id, Amount: r.Amount, GrantRequestID: r.GrantRequestID, Expire: r.Expire, Effective: r.Effective, Reason: r.Reason}, DefaultScale)
	if e, ok := AsError(err); ok && e.Kind.Final() {
		g.requests[id] = RequestRecord{Type: typ, Amount: m.Amount, Refusal: e}
	}
	if err != nil {
		return d, err
	}
	g.requests[id] = RequestRecord{Type: typ, Amount: m.Amount, Version: d.Entry().Version, Last: d.After.Version}
	if e := d.Entry(); e.Type == EntryReversal {
		grant := &g.b.entries[e.GrantVersion-1]
		grant.ReversedAmount = grant.ReversedAmount.Add(reversed(e))
	}
	return d, nil
}

func (g *grants) must(t time.Time, typ EntryType, r Request, f Facts) Decision {
	g.b.tb.Helper()
	d, err := g.do(t, typ, r, f)
	if err != nil {
		g.b.tb.Fatalf("%s %+v at %s: %v", typ, r, t, err)
	}
	return d
}

// ref is the grant of request_id id as a store reads it for a reversal;
// nil if the book has no entry of that request_id.
func (g *grants) ref(id string) *GrantRef {
	for _, e := range g.b.entries {
		if e.RequestID == id && !e.System() {
			return &GrantRef{Version: e.Version, Type: e.Type, Amount: e.Amount.Add(e.PendingChange), Reversed: e.ReversedAmount}
		}
	}
	return nil
}

// sweep writes what DecideExpiry decides at t, as the sweeper would.
func (g *grants) sweep(t time.Time) Decision {
	d := DecideExpiry(g.b.acct, t)
	g.b.entries, g.b.acct = append(g.b.entries, d.Entries...), d.After
	return d
}

// audit fails tb on any finding of Audit over the book as a store keeps it.
func (g *grants) audit(tb testing.TB, cutoff time.Time) {
	tb.Helper()
	var hs []Hold // the hold records, as the entries made and resolved them
	for _, e := range g.b.entries {
		switch {
		case e.Type == EntryHold:
			hs = append(hs, HoldOf(e))
		case e.HoldRequestID != "":
			i := slices.IndexFunc(hs, func(h Hold) bool { return h.RequestID == e.HoldRequestID })
			hs[i] = ResolvedHold(hs[i], e)
		}
	}
	if _, fs := Audit(Partition{Account: g.b.acct, Entries: g.b.entries, Requests: g.requests, Holds: hs}, cutoff); len(fs) > 0 {
		tb.Fatalf("audit: %v", fs)
	}
}

func types(es []Entry) []EntryType {
	out := make([]EntryType, len(es))
	for i, e := range es {
		out[i] = e.Type
	}
	return out
}

func wantReason(tb testing.TB, err error, reason string) {
	tb.Helper()
	if got := ReasonOf(err); got != reason {
		tb.Fatalf("error %v (reason %q), want %s", err, got, reason)
	}
}

var tick = time.Microsecond // the instant: what a store keeps of time

// A pending grant's points are outside the balance until exactly its
// effective time: a purchase one instant before is refused, one at it
// spends them, after a MATURATION the same decision writes first.
func TestPendingGrantMaturesAtItsEffectiveTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		at   time.Duration // after the effective time
		ok   bool
	}{{"one instant before", -tick, false}, {"exactly at", 0, true}, {"one instant after", tick, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			g := newGrants(b)
			eff := t0.Add(time.Hour)
			grant := g.must(t0, EntryGrant, Request{Amount: "10", Effective: eff}, Facts{})
			if e := grant.Entry(); !e.Amount.IsZero() || !e.PendingChange.Equal(d("10")) || !e.EffectiveTime.Equal(eff) || !e.BalanceAfter.IsZero() || !e.PendingAfter.Equal(d("10")) {
				t.Fatalf("pending GRANT %+v, want amount 0, pending_change 10", e)
			}
			at := eff.Add(tc.at)
			if a := b.acct.At(at); a.Balance.Equal(d("10")) != tc.ok || a.Pending.IsZero() != tc.ok {
				t.Fatalf("At(%s): balance %s pending %s", at, a.Balance, a.Pending)
			}
			if _, err := g.do(at, EntryHold, Request{Amount: "1", Expire: at.Add(time.Hour)}, Facts{}); (err == nil) != tc.ok {
				t.Fatalf("hold at %s: %v", at, err)
			}
			dec, err := g.do(at, EntryPurchase, Request{Amount: "9"}, Facts{})
			if !tc.ok {
				wantReason(t, err, ReasonInsufficientBalance)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := types(dec.Entries); fmt.Sprint(got) != "[PURCHASE]" {
				t.Fatalf("purchase wrote %v (the hold's decision matured the grant)", got)
			}
			m := b.entries[1]
			if m.Type != EntryMaturation || !m.Amount.Equal(d("10")) || !m.PendingChange.Equal(d("-10")) || m.GrantRequestID != "r1" || m.GrantVersion != 1 || !m.CreateTime.Equal(at) {
				t.Fatalf("maturation %+v", m)
			}
			g.audit(t, time.Time{})
		})
	}
}

// A pending grant keeps its expiry (which must be after its effective
// time); a ttl counts from the effective time, which the API resolves.
// Its points expire only once matured, so breakage counts matured points:
// a sweep long after both writes the MATURATION, then the EXPIRATION.
func TestPendingPointsExpireAfterTheyMature(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	g := newGrants(b)
	eff, exp := t0.Add(time.Hour), t0.Add(2*time.Hour)
	g.must(t0, EntryGrant, Request{Amount: "10", Effective: eff, Expire: exp}, Facts{})
	g.must(t0, EntryGrant, Request{Amount: "4", Effective: eff, Expire: exp}, Facts{})
	g.must(t0, EntryReversal, Request{GrantRequestID: "r2"}, Facts{}) // never matures, never expires
	if got := b.acct.NextDue(); !got.Equal(eff) {
		t.Fatalf("next due %s, want the maturity %s", got, eff)
	}
	d1 := g.sweep(eff.Add(30 * time.Minute))
	if fmt.Sprint(types(d1.Entries)) != "[MATURATION]" || !b.acct.Balance.Equal(d("10")) || !b.acct.Buckets[0].Expire.Equal(exp) {
		t.Fatalf("sweep at maturity: %v, account %+v", types(d1.Entries), b.acct)
	}
	if got := b.acct.NextDue(); !got.Equal(exp) {
		t.Fatalf("next due %s, want the expiry %s", got, exp)
	}
	g.sweep(exp)
	_, totals, err := Fold("u", b.entries)
	if err != nil {
		t.Fatal(err)
	}
	if !totals.Expired.Equal(d("10")) || !totals.Granted.Equal(d("10")) || !b.acct.Balance.IsZero() || !b.acct.Pending.IsZero() {
		t.Errorf("totals %s, balance %s, pending %s: want 10 granted and expired, nothing left", totals, b.acct.Balance, b.acct.Pending)
	}
	g.audit(t, exp)

	// Both due at once: matured, then expired, in one sweep.
	b2 := newBook(t)
	g2 := newGrants(b2)
	g2.must(t0, EntryGrant, Request{Amount: "3", Effective: eff, Expire: exp}, Facts{})
	if got := types(g2.sweep(exp.Add(time.Hour)).Entries); fmt.Sprint(got) != "[MATURATION EXPIRATION]" {
		t.Errorf("a late sweep wrote %v", got)
	}
	g2.audit(t, exp)
}

// Reversals take back pending points first, then spendable ones, drawn
// soonest expiry first; never more than the grant, never more than is
// available.
func TestReverseGrant(t *testing.T) {
	t.Parallel()
	eff := t0.Add(time.Hour)
	later := t0.Add(10 * time.Hour)
	setup := func(t *testing.T) (*book, *grants) {
		b := newBook(t)
		g := newGrants(b)
		g.must(t0, EntryGrant, Request{Amount: "5", Expire: later}, Facts{})        // r1, spendable
		g.must(t0, EntryGrant, Request{Amount: "10", Effective: eff}, Facts{})      // r2, pending
		g.must(t0, EntryPurchase, Request{Amount: "1", OrderID: "o"}, Facts{})      // r3
		g.must(t0, EntryGrant, Request{Amount: "2", Effective: eff.Add(time.Hour)}, // r4, pending
			Facts{})
		return b, g
	}
	t.Run("pending, in part then the rest", func(t *testing.T) {
		t.Parallel()
		b, g := setup(t)
		e := g.must(t0, EntryReversal, Request{GrantRequestID: "r2", Amount: "4", Reason: "returned"}, Facts{}).Entry()
		if !e.Amount.IsZero() || !e.PendingChange.Equal(d("-4")) || e.GrantRequestID != "r2" || e.GrantVersion != 2 || e.Reason != "returned" || !b.acct.Pending.Equal(d("8")) {
			t.Fatalf("reversal %+v, pending %s", e, b.acct.Pending)
		}
		if a := b.acct.At(eff); !a.Balance.Equal(d("10")) || !a.Pending.Equal(d("2")) {
			t.Fatalf("at maturity: balance %s pending %s, want 4+6, 2", a.Balance, a.Pending)
		}
		e = g.must(t0, EntryReversal, Request{GrantRequestID: "r2"}, Facts{}).Entry()
		if !e.PendingChange.Equal(d("-6")) || !e.Amount.IsZero() {
			t.Fatalf("the rest: %+v", e)
		}
		_, err := g.do(t0, EntryReversal, Request{GrantRequestID: "r2", Amount: "0.01"}, Facts{})
		wantReason(t, err, ReasonReversalExceedsGrant)
		_, err = g.do(t0, EntryReversal, Request{GrantRequestID: "r2"}, Facts{})
		wantReason(t, err, ReasonReversalExceedsGrant)
		g.audit(t, time.Time{})
	})
	t.Run("matured", func(t *testing.T) {
		t.Parallel()
		b, g := setup(t)
		_, err := g.do(eff, EntryReversal, Request{GrantRequestID: "r2", Amount: "12"}, Facts{})
		wantReason(t, err, ReasonReversalExceedsGrant)
		dec := g.must(eff, EntryReversal, Request{GrantRequestID: "r2", Amount: "7"}, Facts{})
		if got := fmt.Sprint(types(dec.Entries)); got != "[MATURATION REVERSAL]" {
			t.Fatalf("wrote %v", got)
		}
		e := dec.Entry()
		// The spendable buckets: 4 expiring later, 10 never: soonest first.
		if !e.Amount.Equal(d("-7")) || !e.PendingChange.IsZero() || !sameDraws(e.Draws, draws(later, "4", time.Time{}, "3")) {
			t.Fatalf("reversal %+v", e)
		}
		if !b.acct.Balance.Equal(d("7")) || !b.acct.Pending.Equal(d("2")) {
			t.Fatalf("after: %+v", b.acct)
		}
		g.audit(t, time.Time{})
	})
	t.Run("partly spent", func(t *testing.T) {
		t.Parallel()
		b, g := setup(t)
		g.must(eff, EntryPurchase, Request{Amount: "12"}, Facts{}) // leaves 2 of the 14 spendable
		_, err := g.do(eff, EntryReversal, Request{GrantRequestID: "r2"}, Facts{})
		wantReason(t, err, ReasonInsufficientBalance)
		// A hold makes available short as well.
		g.must(eff, EntryHold, Request{Amount: "1", Expire: later}, Facts{})
		_, err = g.do(eff, EntryReversal, Request{GrantRequestID: "r2", Amount: "2"}, Facts{})
		wantReason(t, err, ReasonInsufficientBalance)
		e := g.must(eff, EntryReversal, Request{GrantRequestID: "r2", Amount: "1"}, Facts{}).Entry()
		if !e.Amount.Equal(d("-1")) || !b.acct.Available().IsZero() {
			t.Fatalf("reversal %+v, account %+v", e, b.acct)
		}
		if ref := g.ref("r2"); !ref.Reversed.Equal(d("1")) {
			t.Fatalf("reversed %s, want 1", ref.Reversed)
		}
		g.audit(t, time.Time{})
	})
	t.Run("not a grant", func(t *testing.T) {
		t.Parallel()
		_, g := setup(t)
		_, err := g.do(t0, EntryReversal, Request{GrantRequestID: "nope"}, Facts{})
		wantReason(t, err, ReasonGrantNotFound)
		_, err = g.do(t0, EntryReversal, Request{GrantRequestID: "r3"}, Facts{}) // a purchase
		wantReason(t, err, ReasonGrantNotFound)
		g.audit(t, time.Time{})
	})
}

// A reversal racing maturity is decided by time: one instant before the
// effective time it takes pending points, at it spendable ones, after
// the MATURATION its own decision writes.
func TestReversalRacingMaturity(t *testing.T) {
	t.Parallel()
	eff := t0.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		at      time.Time
		written string
		amount  string
		pending string
	}{
		{"one instant before", eff.Add(-tick), "[REVERSAL]", "0", "-10"},
		{"at the effective time", eff, "[MATURATION REVERSAL]", "-10", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			g := newGrants(b)
			g.must(t0, EntryGrant, Request{Amount: "10", Effective: eff}, Facts{})
			dec := g.must(tc.at, EntryReversal, Request{GrantRequestID: "r1"}, Facts{})
			e := dec.Entry()
			if fmt.Sprint(types(dec.Entries)) != tc.written || !e.Amount.Equal(d(tc.amount)) || !e.PendingChange.Equal(d(tc.pending)) {
				t.Fatalf("wrote %v, reversal amount %s pending_change %s", types(dec.Entries), e.Amount, e.PendingChange)
			}
			if !b.acct.Balance.IsZero() || !b.acct.Pending.IsZero() || len(b.acct.PendingLots) != 0 || !b.acct.NextDue().IsZero() {
				t.Fatalf("after: %+v", b.acct)
			}
			if d := DecideExpiry(b.acct, eff.Add(time.Hour)); len(d.Entries) != 0 {
				t.Fatalf("a sweep after the reversal wrote %v", types(d.Entries))
			}
			g.audit(t, eff.Add(time.Hour))
		})
	}
}

// Pending grants are bounded per user; one that matured frees its place.
func TestTooManyPending(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	g := newGrants(b)
	f := Facts{MaxPending: 3}
	for i := range 3 {
		g.must(t0, EntryGrant, Request{Amount: "1", Effective: t0.Add(time.Duration(i+1) * time.Hour)}, f)
	}
	_, err := g.do(t0, EntryGrant, Request{Amount: "1", Effective: t0.Add(time.Hour)}, f)
	wantReason(t, err, ReasonTooManyPending)
	g.must(t0, EntryGrant, Request{Amount: "1"}, f) // spendable at once: not pending
	g.must(t0.Add(time.Hour), EntryGrant, Request{Amount: "1", Effective: t0.Add(5 * time.Hour)}, f)
	if len(b.acct.PendingLots) != 3 || !b.acct.Pending.Equal(d("3")) || !b.acct.Balance.Equal(d("2")) {
		t.Fatalf("account %+v", b.acct)
	}
	// Expiry times count what pending grants will bring to the buckets.
	fb := Facts{MaxBuckets: 2}
	b2 := newBook(t)
	g2 := newGrants(b2)
	g2.must(t0, EntryGrant, Request{Amount: "1", Effective: t0.Add(time.Hour), Expire: t0.Add(3 * time.Hour)}, fb)
	g2.must(t0, EntryGrant, Request{Amount: "1", Effective: t0.Add(time.Hour)}, fb)
	_, err = g2.do(t0, EntryGrant, Request{Amount: "1", Effective: t0.Add(time.Hour), Expire: t0.Add(4 * time.Hour)}, fb)
	wantReason(t, err, ReasonTooManyBuckets)
	g.audit(t, time.Time{})
}

// Grants with an effective time at or before the time they are decided
// are spendable at once: the GRANT and its MATURATION in one decision,
// which its request record counts.
func TestAnEffectiveTimeThatHasComeMaturesAtOnce(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	g := newGrants(b)
	dec := g.must(t0, EntryGrant, Request{Amount: "3", Effective: t0.Add(-time.Minute)}, Facts{})
	if fmt.Sprint(types(dec.Entries)) != "[GRANT MATURATION]" || !dec.After.Balance.Equal(d("3")) || dec.Main != 0 {
		t.Fatalf("wrote %v, after %+v", types(dec.Entries), dec.After)
	}
	g.audit(t, t0)
}

func TestPendingMutationRefusals(t *testing.T) {
	t.Parallel()
	eff := t0.Add(time.Hour)
	for _, tc := range []struct {
		name   string
		typ    EntryType
		r      Request
		reason string
	}{
		{"effective on a purchase", EntryPurchase, Request{Amount: "1", Effective: eff}, ReasonInvalidEffectiveTime},
		{"effective on a debit", EntryAdjustment, Request{Amount: "1", Debit: true, Reason: "x", Effective: eff}, ReasonInvalidEffectiveTime},
		{"expiry at the effective time", EntryGrant, Request{Amount: "1", Effective: eff, Expire: eff}, ReasonInvalidExpiry},
		{"expiry before it", EntryGrant, Request{Amount: "1", Effective: eff, Expire: eff.Add(-tick)}, ReasonInvalidExpiry},
		{"grant_request_id on a grant", EntryGrant, Request{Amount: "1", GrantRequestID: "g"}, ReasonInvalidRequestID},
		{"reversal without its grant", EntryReversal, Request{Amount: "1"}, ReasonInvalidRequestID},
		{"reversal of a bad amount", EntryReversal, Request{Amount: "-1", GrantRequestID: "g"}, ReasonInvalidAmount},
		{"reversal's reason unprintable", EntryReversal, Request{GrantRequestID: "g", Reason: "a\x00"}, ReasonInvalidReason},
		{"a maturation asked for", EntryMaturation, Request{Amount: "1"}, ReasonInvalidAmount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.r.UserID, tc.r.RequestID = "u", "r"
			_, err := NewMutation(tc.typ, tc.r, DefaultScale)
			if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Reason != tc.reason {
				t.Fatalf("NewMutation: %v, want invalid %s", err, tc.reason)
			}
		})
	}
	// A pending credit adjustment is allowed; the spec is in the hash.
	a := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "r", Amount: "1", Effective: eff, EffectiveSpec: "delay 1h0m0s"})
	b := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "r", Amount: "1", Effective: eff.Add(time.Second), EffectiveSpec: "delay 1h0m0s"})
	c := mustMutation(t, EntryGrant, Request{UserID: "u", RequestID: "r", Amount: "1"})
	if a.Hash() != b.Hash() || a.Hash() == c.Hash() {
		t.Error("a delay resolved twice must hash alike, and unlike no delay")
	}
	mustMutation(t, EntryAdjustment, Request{UserID: "u", RequestID: "r", Amount: "1", Reason: "x", Effective: eff})
}

// A sweeper that writes a bounded number of entries at once matures many
// grants due at one instant in parts, and expires buckets only after the
// last of them.
func TestMaturationInParts(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	g := newGrants(b)
	eff, exp := t0.Add(time.Hour), t0.Add(2*time.Hour)
	g.must(t0, EntryGrant, Request{Amount: "100", Expire: eff.Add(time.Minute)}, Facts{})
	for range 5 {
		g.must(t0, EntryGrant, Request{Amount: "2", Effective: eff, Expire: exp}, Facts{})
	}
	at := exp.Add(-time.Minute)
	whole := DecideExpiry(b.acct, at)
	var parts []string
	for {
		d := DecideExpiryUpTo(b.acct, at, 2)
		if len(d.Entries) == 0 {
			break
		}
		parts = append(parts, fmt.Sprint(types(d.Entries)))
		b.entries, b.acct = append(b.entries, d.Entries...), d.After
	}
	if got := fmt.Sprint(parts); got != "[[MATURATION MATURATION] [MATURATION MATURATION] [MATURATION EXPIRATION]]" {
		t.Errorf("parts %s", got)
	}
	if w := whole.After; w.Version != b.acct.Version || !w.Balance.Equal(d("10")) || !b.acct.Balance.Equal(d("10")) || len(b.acct.PendingLots) != 0 {
		t.Errorf("in parts %+v, at once %+v", b.acct, w)
	}
	g.audit(t, at)
}

// Random grants (half of them pending), purchases, holds, reversals and
// sweeps at random times: whatever happens, balance and pending are the
// fold of the entries (each entry's amount and pending_change), the
// reversals of a grant never exceed it, nothing is negative, and the audit
// finds nothing.
func TestPendingKeepsTheAccountsSums(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 3))
		b := newBook(t)
		g := newGrants(b)
		now := t0
		var grantIDs []string
		for range 60 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Minute)
			amount := decimal.New(int64(1+rng.IntN(2000)), -2)
			var err error
			switch k := rng.IntN(6); {
			case k <= 1:
				r := Request{Amount: amount.String()}
				if rng.IntN(2) == 0 {
					r.Effective = now.Add(time.Duration(rng.IntN(180)-20) * time.Minute)
				}
				if rng.IntN(2) == 0 {
					r.Expire = now.Add(time.Duration(200+rng.IntN(300)) * time.Minute)
				}
				var dec Decision
				dec, err = g.do(now, EntryGrant, r, Facts{MaxBuckets: 8, MaxPending: 6})
				if err == nil {
					grantIDs = append(grantIDs, dec.Entry().RequestID)
				}
			case k == 2:
				_, err = g.do(now, EntryPurchase, Request{Amount: amount.String()}, Facts{})
			case k == 3:
				_, err = g.do(now, EntryHold, Request{Amount: amount.String(), Expire: now.Add(time.Hour)}, Facts{})
			case k == 4 && len(grantIDs) > 0:
				r := Request{GrantRequestID: grantIDs[rng.IntN(len(grantIDs))]}
				if rng.IntN(2) == 0 {
					r.Amount = amount.String()
				}
				_, err = g.do(now, EntryReversal, r, Facts{})
			default:
				g.sweep(now)
			}
			if e, ok := AsError(err); err != nil && (!ok || !e.Kind.Final()) {
				t.Fatalf("seed %d: %v", seed, err)
			}
			sum, pending := decimal.Zero, decimal.Zero
			for _, e := range b.entries {
				sum, pending = sum.Add(e.Amount), pending.Add(e.PendingChange)
			}
			a := b.acct
			if !sum.Equal(a.Balance) || !pending.Equal(a.Pending) || !PendingTotal(a.PendingLots).Equal(a.Pending) ||
				a.Balance.IsNegative() || a.Pending.IsNegative() || a.Available().IsNegative() {
				t.Fatalf("seed %d: entries sum to %s, pending %s; account %+v", seed, sum, pending, a)
			}
			for _, id := range grantIDs {
				if ref := g.ref(id); ref.Reversed.GreaterThan(ref.Amount) {
					t.Fatalf("seed %d: grant %s of %s reversed %s", seed, id, ref.Amount, ref.Reversed)
				}
			}
		}
		folded, _, err := Fold("u", b.entries)
		if err != nil {
			t.Fatal(err)
		}
		if !folded.Pending.Equal(b.acct.Pending) || lotsText(folded.PendingLots) != lotsText(b.acct.PendingLots) {
			t.Fatalf("seed %d: fold %+v, decided %+v", seed, folded, b.acct)
		}
		g.audit(t, time.Time{})
		if !slices.IsSortedFunc(b.entries, func(x, y Entry) int { return x.CreateTime.Compare(y.CreateTime) }) {
			t.Fatalf("seed %d: entry times go back", seed)
		}
	}
}

// The audit finds what breaks the rules of pending points and reversals.
func TestAuditOfPendingAndReversals(t *testing.T) {
	t.Parallel()
	eff := t0.Add(time.Hour)
	sound := func(t *testing.T) Partition {
		b := newBook(t)
		g := newGrants(b)
		g.must(t0, EntryGrant, Request{Amount: "10", Effective: eff}, Facts{})
		g.must(t0, EntryGrant, Request{Amount: "5", Effective: eff.Add(time.Hour)}, Facts{})
		g.must(t0, EntryReversal, Request{GrantRequestID: "r1", Amount: "4"}, Facts{})
		return Partition{Account: b.acct, Entries: b.entries, Requests: g.requests}
	}
	for _, tc := range []struct {
		name   string
		edit   func(p *Partition)
		cutoff time.Time
		want   string
	}{
		{"sound", func(*Partition) {}, time.Time{}, "[]"},
		{"sound before the grace", func(*Partition) {}, eff, "[]"},
		{"pending off", func(p *Partition) { p.Account.Pending = d("12") }, time.Time{}, "[pending]"},
		{"a lot gone", func(p *Partition) { p.Account.PendingLots = p.Account.PendingLots[1:] }, time.Time{}, "[pending pending]"},
		{"reversed amount off", func(p *Partition) { p.Entries[0].ReversedAmount = d("3") }, time.Time{}, "[reversed_amount]"},
		{"reversal names a reversal", func(p *Partition) { p.Entries[2].GrantVersion = 3 }, time.Time{}, "[reversal_target reversed_amount]"},
		{"reversals over the grant", func(p *Partition) {
			// Taking 11 of a lot of 10 leaves the fold's pending short of its
			// lots, which is a finding of its own.
			p.Entries[2].PendingChange, p.Entries[2].PendingAfter = d("-11"), d("4")
			p.Entries[0].ReversedAmount = d("11")
			p.Requests["r3"] = RequestRecord{Type: EntryReversal, Amount: d("11"), Version: 3, Last: 3}
			p.Account, _, _ = Fold("u", p.Entries)
		}, time.Time{}, "[pending reversal_over_grant]"},
		{"matured long ago, still pending", func(*Partition) {}, eff.Add(tick), "[maturity_not_recorded]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := sound(t)
			tc.edit(&p)
			_, fs := Audit(p, tc.cutoff)
			kinds := make([]string, len(fs))
			for i, f := range fs {
				kinds[i] = f.Kind
			}
			if got := fmt.Sprint(kinds); got != tc.want {
				t.Errorf("findings %v, want kinds %s", fs, tc.want)
			}
		})
	}
}
