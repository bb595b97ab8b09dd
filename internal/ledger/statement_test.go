package ledger

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// statementOf is the statement of [start, end) of b's entries, folded
// from no snapshot.
func statementOf(tb testing.TB, b *book, start, end time.Time) Statement {
	tb.Helper()
	opening, err := AccountAsOf("u", Account{}, b.entries, JustBefore(start))
	if err != nil {
		tb.Fatal(err)
	}
	closing, err := AccountAsOf("u", Account{}, b.entries, JustBefore(end))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := NewStatement("u", start, end, opening, closing, b.entries[opening.Version:closing.Version])
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestAccountAsOf(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	h := time.Hour
	b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(2 * h)}, Facts{})
	b.must(t0.Add(h), EntryGrant, Request{Amount: "5", Effective: t0.Add(3 * h)}, Facts{})
	b.must(t0.Add(h), EntryPurchase, Request{Amount: "4"}, Facts{})
	b.hold(t0.Add(90*time.Minute), "3", t0.Add(100*time.Minute))
	tests := []struct {
		name                              string
		at                                time.Time
		version                           int64
		balance, available, held, pending string
	}{
		{"before the first entry", t0.Add(-time.Microsecond), 0, "0", "0", "0", "0"},
		{"at the first entry", t0, 1, "10", "10", "0", "0"},
		{"between entries", t0.Add(30 * time.Minute), 1, "10", "10", "0", "0"},
		{"at two entries of one instant", t0.Add(h), 3, "6", "6", "0", "5"},
		{"just before them", t0.Add(h - time.Microsecond), 1, "10", "10", "0", "0"},
		{"with a hold", t0.Add(95 * time.Minute), 4, "6", "3", "3", "5"},
		{"the hold expired by time, no RELEASE", t0.Add(100 * time.Minute), 4, "6", "6", "0", "5"},
		{"the bucket expired by time, no EXPIRATION", t0.Add(2 * h), 4, "0", "0", "0", "5"},
		{"matured by time, no MATURATION", t0.Add(3 * h), 4, "5", "5", "0", "0"},
		{"sub-microsecond digits are dropped", t0.Add(time.Microsecond - 1), 1, "10", "10", "0", "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := AccountAsOf("u", Account{}, b.entries, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			at := a.At(tc.at)
			if a.Version != tc.version || !at.Balance.Equal(dec(tc.balance)) || !at.Available().Equal(dec(tc.available)) ||
				!at.Held.Equal(dec(tc.held)) || !at.Pending.Equal(dec(tc.pending)) {
				t.Errorf("as of %s: version %d balance %s available %s held %s pending %s; want %d %s %s %s %s",
					tc.at, a.Version, at.Balance, at.Available(), at.Held, at.Pending, tc.version, tc.balance, tc.available, tc.held, tc.pending)
			}
		})
	}
	// From a snapshot: the same account as from the start.
	snap, err := AccountAsOf("u", Account{}, b.entries[:2], t0.Add(h))
	if err != nil {
		t.Fatal(err)
	}
	a, err := AccountAsOf("u", snap, b.entries[2:], t0.Add(95*time.Minute))
	if err != nil || a.Version != 4 || !a.At(t0.Add(95*time.Minute)).Available().Equal(dec("3")) {
		t.Fatalf("from a snapshot: %+v, %v", a, err)
	}
	if _, err := AccountAsOf("u", snap, b.entries[3:], t0.Add(3*h)); err == nil {
		t.Fatal("a gap after the snapshot folded without an error")
	}
}

func TestStatement(t *testing.T) {
	t.Parallel()
	h := time.Hour
	tests := []struct {
		name       string
		build      func(b *book)
		start, end time.Time
		opening    string
		closing    string
		totals     StatementTotals
		unrecorded string
		entries    int
	}{
		{
			name: "expired in the window, recorded after it",
			build: func(b *book) {
				b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(2 * h)}, Facts{})
				b.must(t0.Add(5*h), EntryGrant, Request{Amount: "1"}, Facts{}) // writes the EXPIRATION first
			},
			start: t0.Add(h), end: t0.Add(3 * h),
			opening: "10", closing: "0", unrecorded: "-10",
		},
		{
			name: "expired before the window, recorded in it",
			build: func(b *book) {
				b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(h)}, Facts{})
				b.must(t0.Add(3*h), EntryGrant, Request{Amount: "1"}, Facts{})
			},
			start: t0.Add(2 * h), end: t0.Add(4 * h),
			opening: "0", closing: "1", unrecorded: "10", entries: 2,
			totals: StatementTotals{Granted: dec("1"), Expired: dec("-10")},
		},
		{
			name: "expired and recorded in the window",
			build: func(b *book) {
				b.must(t0, EntryGrant, Request{Amount: "10", Expire: t0.Add(2 * h)}, Facts{})
				b.must(t0, EntryGrant, Request{Amount: "1"}, Facts{})
				b.must(t0.Add(3*h), EntryPurchase, Request{Amount: "1"}, Facts{})
			},
			start: t0.Add(h), end: t0.Add(4 * h),
			opening: "11", closing: "0", unrecorded: "0", entries: 2,
			totals: StatementTotals{Expired: dec("-10"), Spent: dec("-1")},
		},
		{
			name: "an entry at the start is in the window, not in the opening",
			build: func(b *book) {
				b.must(t0, EntryGrant, Request{Amount: "10"}, Facts{})
				b.must(t0.Add(h), EntryPurchase, Request{Amount: "4"}, Facts{})
				b.must(t0.Add(2*h), EntryGrant, Request{Amount: "7"}, Facts{})
			},
			start: t0.Add(h), end: t0.Add(2 * h),
			opening: "10", closing: "6", unrecorded: "0", entries: 1,
			totals: StatementTotals{Spent: dec("-4")},
		},
		{
			name: "matured in the window, recorded after it",
			build: func(b *book) {
				b.must(t0, EntryGrant, Request{Amount: "5", Effective: t0.Add(2 * h)}, Facts{})
				b.must(t0.Add(5*h), EntryGrant, Request{Amount: "1"}, Facts{})
			},
			start: t0.Add(h), end: t0.Add(3 * h),
			opening: "0", closing: "5", unrecorded: "5",
		},
		{
			name: "a hold and a capture",
			build: func(b *book) {
				b.must(t0, EntryGrant, Request{Amount: "10"}, Facts{})
				id := b.hold(t0.Add(h), "6", t0.Add(5*h))
				b.must(t0.Add(2*h), EntryCapture, Request{HoldRequestID: id, Amount: "4"}, Facts{})
			},
			start: t0.Add(30 * time.Minute), end: t0.Add(3 * h),
			opening: "10", closing: "6", unrecorded: "0", entries: 2,
			totals: StatementTotals{Spent: dec("-4")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			tc.build(b)
			s := statementOf(t, b, tc.start, tc.end)
			if !s.Opening.Equal(dec(tc.opening)) || !s.Closing.Equal(dec(tc.closing)) || !s.Unrecorded.Equal(dec(tc.unrecorded)) || len(s.Entries) != tc.entries {
				t.Errorf("opening %s closing %s unrecorded %s entries %d; want %s %s %s %d",
					s.Opening, s.Closing, s.Unrecorded, len(s.Entries), tc.opening, tc.closing, tc.unrecorded, tc.entries)
			}
			if !sameTotals(s.Totals, tc.totals) {
				t.Errorf("totals %+v, want %+v", s.Totals, tc.totals)
			}
			if got := s.Opening.Add(s.Totals.Sum()).Add(s.Unrecorded); !got.Equal(s.Closing) {
				t.Errorf("opening + sum + unrecorded = %s, closing %s", got, s.Closing)
			}
		})
	}
}

func sameTotals(a, b StatementTotals) bool {
	return a.Granted.Equal(b.Granted) && a.Matured.Equal(b.Matured) && a.Spent.Equal(b.Spent) && a.Refunded.Equal(b.Refunded) &&
		a.Expired.Equal(b.Expired) && a.Adjusted.Equal(b.Adjusted) && a.Reversed.Equal(b.Reversed)
}

func TestStatementQueryCheck(t *testing.T) {
	t.Parallel()
	for name, q := range map[string]StatementQuery{
		"no start":                   {End: t0},
		"no end":                     {Start: t0},
		"end = start":                {Start: t0, End: t0},
		"end < start":                {Start: t0, End: t0.Add(-time.Hour)},
		"end in start's microsecond": {Start: t0, End: t0.Add(time.Microsecond - 1)},
		"negative page":              {Start: t0, End: t0.Add(time.Hour), Page: Page{PageSize: -1}},
	} {
		if _, err := q.Check("u"); kindOf(err) != KindInvalid {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if _, err := (StatementQuery{Start: t0, End: t0.Add(time.Hour)}).Check("u#1"); kindOf(err) != KindInvalid {
		t.Errorf("a bad user id: %v", err)
	}
}

// randomHistory is a user's history of grants (expiring, pending or
// neither), purchases, holds with their captures and voids, and the
// sweeper, at times that move on by random steps. reads records, after
// each step, what a balance read answered then: the account as the
// aggregate was, At that time.
func randomHistory(tb testing.TB, seed uint64, steps int) (b *book, reads map[time.Time]Account) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, 34))
	b, hs := newBook(tb), holds{}
	reads = map[time.Time]Account{}
	now := t0
	var ids []string
	for range steps {
		now = now.Add(time.Duration(1+rng.IntN(60)) * time.Minute)
		amount := decimal.New(int64(1+rng.IntN(2000)), -2)
		var d Decision
		var err error
		switch k := rng.IntN(8); {
		case k <= 1:
			r := Request{Amount: amount.String()}
			if rng.IntN(3) > 0 {
				r.Expire = now.Add(time.Duration(1+rng.IntN(6)) * time.Hour)
			}
			if rng.IntN(3) == 0 {
				r.Effective = now.Add(time.Duration(1+rng.IntN(60)) * time.Minute)
				if !r.Expire.IsZero() {
					r.Expire = r.Effective.Add(time.Duration(1+rng.IntN(6)) * time.Hour)
				}
			}
			d, err = b.do(now, EntryGrant, r, Facts{MaxBuckets: 8})
		case k == 2:
			d, err = b.do(now, EntryPurchase, Request{Amount: amount.String()}, Facts{})
		case k == 3:
			d, err = b.do(now, EntryHold, Request{Amount: amount.String(), Expire: now.Add(time.Duration(1+rng.IntN(120)) * time.Minute)}, Facts{MaxHolds: 4})
			if err == nil {
				ids = append(ids, d.Entry().RequestID)
			}
		case k == 4 && len(ids) > 0:
			id := ids[rng.IntN(len(ids))]
			typ := EntryCapture
			if rng.IntN(2) == 0 {
				typ = EntryRelease
			}
			d, err = b.do(now, typ, Request{HoldRequestID: id}, hs.facts(id))
		case k == 5:
			d = DecideExpiry(b.acct, now)
			b.entries, b.acct = append(b.entries, d.Entries...), d.After
		}
		if e, ok := AsError(err); err != nil && (!ok || !e.Kind.Final()) {
			tb.Fatalf("seed %d: %v", seed, err)
		}
		hs.record(d)
		// A read a little after the step, before the next one.
		read := now.Add(time.Duration(rng.IntN(59)) * time.Second)
		reads[read] = b.acct
	}
	return b, reads
}

// The account as of a time is what a balance read answered at that time,
// and every statement's identity holds, over random histories.
func TestAsOfAndStatementsOverRandomHistories(t *testing.T) {
	t.Parallel()
	for seed := range uint64(150) {
		b, reads := randomHistory(t, seed, 50)
		for at, acct := range reads {
			want := acct.At(at)
			a, err := AccountAsOf("u", Account{}, b.entries, at)
			if err != nil {
				t.Fatal(err)
			}
			got := a.At(at)
			if a.Version != acct.Version || !got.Balance.Equal(want.Balance) || !got.Held.Equal(want.Held) || !got.Pending.Equal(want.Pending) {
				t.Fatalf("seed %d: as of %s: version %d balance %s held %s pending %s; the read then: %d %s %s %s",
					seed, at, a.Version, got.Balance, got.Held, got.Pending, acct.Version, want.Balance, want.Held, want.Pending)
			}
			// From a snapshot taken at any version before it: the same.
			v := int64(0)
			if a.Version > 0 {
				v = rand.Int64N(a.Version)
			}
			snap, _, _ := Fold("u", b.entries[:v])
			if fromSnap, err := AccountAsOf("u", snap, b.entries[v:], at); err != nil || fromSnap.Version != a.Version || !fromSnap.At(at).Balance.Equal(got.Balance) {
				t.Fatalf("seed %d: as of %s from the snapshot at version %d: %+v, %v", seed, at, v, fromSnap, err)
			}
		}
		last := b.entries[len(b.entries)-1].CreateTime
		rng := rand.New(rand.NewPCG(seed, 35))
		for range 20 {
			start := t0.Add(time.Duration(rng.Int64N(int64(last.Sub(t0)))))
			end := start.Add(time.Duration(1 + rng.Int64N(int64(last.Sub(t0)))))
			s := statementOf(t, b, start, end)
			sum := decimal.Zero
			for _, e := range s.Entries {
				if e.CreateTime.Before(s.Start) || !e.CreateTime.Before(s.End) {
					t.Fatalf("seed %d: entry v%d at %s outside [%s, %s)", seed, e.Version, e.CreateTime, s.Start, s.End)
				}
				sum = sum.Add(e.Amount)
			}
			if !sum.Equal(s.Totals.Sum()) {
				t.Fatalf("seed %d: totals %s, the entries sum to %s", seed, s.Totals.Sum(), sum)
			}
			if got := s.Opening.Add(sum).Add(s.Unrecorded); !got.Equal(s.Closing) {
				t.Fatalf("seed %d: [%s, %s): opening %s + %s + unrecorded %s = %s, closing %s", seed, start, end, s.Opening, sum, s.Unrecorded, got, s.Closing)
			}
		}
	}
}

func kindOf(err error) Kind {
	if e, ok := AsError(err); ok {
		return e.Kind
	}
	return -1
}
