package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// AsOfStore is a store that answers the account at a time and statements
// (issue 34).
type AsOfStore interface {
	ledger.Store
	AccountAt(ctx context.Context, user string, t time.Time) (ledger.Account, error)
	Statement(ctx context.Context, user string, q ledger.StatementQuery) (ledger.Statement, string, error)
}

// AsOfContract runs the suite of the account at a time and statements
// that every AsOfStore must pass. newStore returns an empty store whose
// clock is now.
func AsOfContract(t *testing.T, newStore func(t *testing.T, now func() time.Time) AsOfStore) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, s AsOfStore, clk *Clock)
	}{
		{"as of a time: at, just before and between entries", asOfAroundEntries},
		{"as of a time: a bucket expired by time, no EXPIRATION yet", asOfExpiredBucket},
		{"as of a time: points matured by time", asOfMatured},
		{"as of a time: a hold expired by time", asOfExpiredHold},
		{"a statement pages with the same totals on every page", statementPaged},
		{"as of is what a read said then, and statements add up, over random histories", asOfRandomHistories},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
			c.test(t, newStore(t, clk.Now), clk)
		})
	}
}

// asOf is the account of "u" at t as a balance read then would answer it:
// the entries' fold at t (AccountAt), and what time decided by t (At).
func asOf(t *testing.T, s AsOfStore, at time.Time) (recorded, answer ledger.Account) {
	t.Helper()
	a, err := s.AccountAt(context.Background(), "u", at)
	if err != nil {
		t.Fatal(err)
	}
	return a, a.At(at)
}

func wantAsOf(t *testing.T, s AsOfStore, at time.Time, version int64, balance, available, held, pending string) {
	t.Helper()
	a, got := asOf(t, s, at)
	if a.Version != version || !got.Balance.Equal(amount(balance)) || !got.Available().Equal(amount(available)) ||
		!got.Held.Equal(amount(held)) || !got.Pending.Equal(amount(pending)) {
		t.Errorf("as of %s: version %d, balance %s, available %s, held %s, pending %s; want %d, %s, %s, %s, %s",
			at.Format(time.RFC3339Nano), a.Version, got.Balance, got.Available(), got.Held, got.Pending, version, balance, available, held, pending)
	}
}

func asOfAroundEntries(t *testing.T, s AsOfStore, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "10"})
	clk.Add(time.Hour)
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p1", Amount: "4"})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "1"}) // the same instant
	wantAsOf(t, s, t0.Add(-time.Microsecond), 0, "0", "0", "0", "0")
	wantAsOf(t, s, t0.Add(-24*time.Hour), 0, "0", "0", "0", "0")
	wantAsOf(t, s, t0, 1, "10", "10", "0", "0")
	wantAsOf(t, s, t0.Add(30*time.Minute), 1, "10", "10", "0", "0")
	wantAsOf(t, s, t0.Add(time.Hour-time.Microsecond), 1, "10", "10", "0", "0")
	wantAsOf(t, s, t0.Add(time.Hour), 3, "7", "7", "0", "0")
	wantAsOf(t, s, t0.Add(1000*time.Hour), 3, "7", "7", "0", "0")
	if a, err := s.AccountAt(context.Background(), "nobody", t0); err != nil || a.Version != 0 || !a.Balance.IsZero() || a.UserID != "nobody" {
		t.Errorf("a user with no entries: %+v, %v", a, err)
	}
	if _, err := s.AccountAt(context.Background(), "bad#user", t0); ledger.ReasonOf(err) != ledger.ReasonInvalidUserID {
		t.Errorf("a bad user id: %v", err)
	}
}

func asOfExpiredBucket(t *testing.T, s AsOfStore, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "10", Expire: t0.Add(2 * time.Hour)})
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "3"})
	clk.Add(time.Hour)
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p1", Amount: "4"})
	wantAsOf(t, s, t0.Add(2*time.Hour-time.Microsecond), 3, "9", "9", "0", "0")
	wantAsOf(t, s, t0.Add(2*time.Hour), 3, "3", "3", "0", "0") // nothing on the record says so yet
	if got := entryTypes(t, s); got != "[GRANT GRANT PURCHASE]" {
		t.Fatalf("entries %s: the test wants no EXPIRATION", got)
	}
	clk.Add(5 * time.Hour)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g3", Amount: "1"}) // now the EXPIRATION, at t0+6h
	wantAsOf(t, s, t0.Add(3*time.Hour), 3, "3", "3", "0", "0")
	wantAsOf(t, s, t0.Add(6*time.Hour), 5, "4", "4", "0", "0")
	st, _, err := s.Statement(context.Background(), "u", ledger.StatementQuery{Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour)})
	if err != nil || !st.Opening.Equal(amount("13")) || !st.Closing.Equal(amount("3")) || !st.Unrecorded.Equal(amount("-6")) ||
		!st.Totals.Spent.Equal(amount("-4")) || len(st.Entries) != 1 {
		t.Errorf("statement of the expiry: %+v, %v; want 13 -> 3, spent -4, unrecorded -6", st, err)
	}
	st, _, err = s.Statement(context.Background(), "u", ledger.StatementQuery{Start: t0.Add(3 * time.Hour), End: t0.Add(7 * time.Hour)})
	if err != nil || !st.Opening.Equal(amount("3")) || !st.Closing.Equal(amount("4")) || !st.Unrecorded.Equal(amount("6")) ||
		!st.Totals.Expired.Equal(amount("-6")) || !st.Totals.Granted.Equal(amount("1")) || len(st.Entries) != 2 {
		t.Errorf("statement of the EXPIRATION's window: %+v, %v; want 3 -> 4, expired -6, granted 1, unrecorded 6", st, err)
	}
}

func asOfMatured(t *testing.T, s AsOfStore, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "5", Effective: t0.Add(time.Hour)})
	wantAsOf(t, s, t0, 1, "0", "0", "0", "5")
	wantAsOf(t, s, t0.Add(time.Hour-time.Microsecond), 1, "0", "0", "0", "5")
	wantAsOf(t, s, t0.Add(time.Hour), 1, "5", "5", "0", "0")
	clk.Add(2 * time.Hour)
	if x, err := s.Expire(context.Background(), "u"); err != nil || x.Entry.Type != ledger.EntryMaturation {
		t.Fatalf("the sweeper: %+v, %v", x, err)
	}
	wantAsOf(t, s, t0.Add(90*time.Minute), 1, "5", "5", "0", "0")
	wantAsOf(t, s, t0.Add(2*time.Hour), 2, "5", "5", "0", "0")
}

func asOfExpiredHold(t *testing.T, s AsOfStore, clk *Clock) {
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "10"})
	Must(t, s, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "6", Expire: t0.Add(time.Hour)})
	wantAsOf(t, s, t0.Add(30*time.Minute), 2, "10", "4", "6", "0")
	wantAsOf(t, s, t0.Add(time.Hour), 2, "10", "10", "0", "0")
	clk.Add(2 * time.Hour)
	Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: "p1", Amount: "10"}) // the RELEASE first
	wantAsOf(t, s, t0.Add(time.Hour), 2, "10", "10", "0", "0")
	wantAsOf(t, s, t0.Add(2*time.Hour), 4, "0", "0", "0", "0")
}

func statementPaged(t *testing.T, s AsOfStore, clk *Clock) {
	ctx := context.Background()
	t0 := clk.Now()
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "before", Amount: "100"})
	clk.Add(time.Hour)
	for i := range 7 {
		Must(t, s, ledger.EntryPurchase, ledger.Request{RequestID: fmt.Sprint("p", i), Amount: "2"})
		clk.Add(time.Minute)
	}
	Must(t, s, ledger.EntryRefund, ledger.Request{RequestID: "r", PurchaseRequestID: "p0", Amount: "1"})
	clk.Add(time.Hour)
	Must(t, s, ledger.EntryGrant, ledger.Request{RequestID: "after", Amount: "5"})
	q := ledger.StatementQuery{Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), Page: ledger.Page{PageSize: 3}}
	var versions []int64
	for page := 0; ; page++ {
		st, next, err := s.Statement(ctx, "u", q)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Opening.Equal(amount("100")) || !st.Closing.Equal(amount("87")) || !st.Totals.Spent.Equal(amount("-14")) ||
			!st.Totals.Refunded.Equal(amount("1")) || !st.Unrecorded.IsZero() || st.OpeningVersion != 1 || st.ClosingVersion != 9 {
			t.Fatalf("page %d: %+v", page, st)
		}
		for _, e := range st.Entries {
			versions = append(versions, e.Version)
		}
		if next == "" {
			break
		}
		if page > 3 {
			t.Fatal("more pages than entries")
		}
		q.PageToken = next
	}
	if fmt.Sprint(versions) != "[2 3 4 5 6 7 8 9]" {
		t.Errorf("entries of the window: %v, want versions 2 to 9", versions)
	}
	// A token is good for its window only.
	first, next, err := s.Statement(ctx, "u", ledger.StatementQuery{Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), Page: ledger.Page{PageSize: 3}})
	if err != nil || len(first.Entries) != 3 || next == "" {
		t.Fatalf("first page: %+v, %q, %v", first, next, err)
	}
	_, _, err = s.Statement(ctx, "u", ledger.StatementQuery{Start: t0, End: t0.Add(2 * time.Hour), Page: ledger.Page{PageSize: 3, PageToken: next}})
	if ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
		t.Errorf("a token of another window: %v, want %s", err, ledger.ReasonInvalidPageToken)
	}
	if _, _, err := s.Statement(ctx, "u", ledger.StatementQuery{Start: t0, End: t0}); ledger.ReasonOf(err) != ledger.ReasonInvalidFilter {
		t.Errorf("an empty window: %v, want %s", err, ledger.ReasonInvalidFilter)
	}
}

// asOfRandomHistories writes a random history of more entries than
// snapshots are apart (grants that expire or are pending, purchases,
// holds, captures and voids, the sweeper), notes what a balance read
// answered after each step, then checks that the account as of each of
// those times answers the same, and that random statements add up with
// the entries their pages list.
func asOfRandomHistories(t *testing.T, s AsOfStore, clk *Clock) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(34, 1))
	t0 := clk.Now()
	type read struct {
		at   time.Time
		acct ledger.Account
	}
	var reads []read
	var holds []string
	for i := range 3 * ledger.SnapshotEvery {
		clk.Add(time.Duration(1+rng.IntN(30)) * time.Minute)
		now := clk.Now()
		amt := decimal.New(int64(1+rng.IntN(2000)), -2).String()
		id := fmt.Sprint("r", i)
		var err error
		switch k := rng.IntN(8); {
		case k <= 2:
			r := ledger.Request{RequestID: id, Amount: amt}
			if rng.IntN(2) == 0 {
				r.Expire = now.Add(time.Duration(1+rng.IntN(4)) * time.Hour)
			}
			if rng.IntN(4) == 0 {
				r.Effective = now.Add(time.Duration(1+rng.IntN(60)) * time.Minute)
				if !r.Expire.IsZero() {
					r.Expire = r.Effective.Add(time.Hour)
				}
			}
			_, err = apply(t, s, ledger.EntryGrant, r)
		case k == 3:
			_, err = apply(t, s, ledger.EntryPurchase, ledger.Request{RequestID: id, Amount: amt})
		case k == 4:
			_, err = apply(t, s, ledger.EntryHold, ledger.Request{RequestID: id, Amount: amt, Expire: now.Add(time.Duration(1+rng.IntN(90)) * time.Minute)})
			if err == nil {
				holds = append(holds, id)
			}
		case k == 5 && len(holds) > 0:
			typ := ledger.EntryCapture
			if rng.IntN(2) == 0 {
				typ = ledger.EntryRelease
			}
			_, err = apply(t, s, typ, ledger.Request{RequestID: id, HoldRequestID: holds[rng.IntN(len(holds))]})
		case k == 6:
			_, err = s.Expire(ctx, "u")
		}
		if e, ok := ledger.AsError(err); err != nil && (!ok || !e.Kind.Final()) {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(rng.IntN(59)) * time.Second)
		acct, err := s.Balance(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, read{at, acct})
	}
	last := Sound(t, s, "u")
	if last.Version <= ledger.SnapshotEvery {
		t.Fatalf("%d entries: the test wants more than snapshots are apart", last.Version)
	}
	for _, r := range reads {
		want := r.acct.At(r.at)
		a, got := asOf(t, s, r.at)
		if a.Version != r.acct.Version || !got.Balance.Equal(want.Balance) || !got.Held.Equal(want.Held) || !got.Pending.Equal(want.Pending) {
			t.Fatalf("as of %s: version %d balance %s held %s pending %s; a read then: %d %s %s %s",
				r.at.Format(time.RFC3339Nano), a.Version, got.Balance, got.Held, got.Pending, r.acct.Version, want.Balance, want.Held, want.Pending)
		}
	}
	statementsAddUp(t, s, rng, t0, clk.Now())
}

// statementsAddUp pages through random statements of "u" between from and
// to: each page has the same balances and totals, the entries are the
// window's in version order, and opening + their amounts +
// unrecorded_change = closing.
func statementsAddUp(t *testing.T, s AsOfStore, rng *rand.Rand, from, to time.Time) {
	ctx := context.Background()
	span := int64(to.Sub(from))
	t0 := from
	for range 12 {
		start := t0.Add(time.Duration(rng.Int64N(span)))
		q := ledger.StatementQuery{Start: start, End: start.Add(time.Duration(1 + rng.Int64N(span/2))), Page: ledger.Page{PageSize: 1 + rng.IntN(40)}}
		sum, n := decimal.Zero, 0
		var first ledger.Statement
		for {
			st, next, err := s.Statement(ctx, "u", q)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				first = st
			} else if !st.Opening.Equal(first.Opening) || !st.Closing.Equal(first.Closing) || !sameTotals(st.Totals, first.Totals) {
				t.Fatalf("a later page of [%s, %s) says otherwise: %+v, first %+v", q.Start, q.End, st, first)
			}
			for _, e := range st.Entries {
				if e.CreateTime.Before(first.Start) || !e.CreateTime.Before(first.End) || e.Version != first.OpeningVersion+int64(n)+1 {
					t.Fatalf("[%s, %s): entry %d is version %d at %s", first.Start, first.End, n, e.Version, e.CreateTime)
				}
				sum, n = sum.Add(e.Amount), n+1
			}
			if next == "" {
				break
			}
			q.PageToken = next
		}
		if int64(n) != first.ClosingVersion-first.OpeningVersion {
			t.Fatalf("[%s, %s): %d entries listed, versions %d to %d", first.Start, first.End, n, first.OpeningVersion, first.ClosingVersion)
		}
		if got := first.Opening.Add(sum).Add(first.Unrecorded); !got.Equal(first.Closing) || !sum.Equal(first.Totals.Sum()) {
			t.Fatalf("[%s, %s): opening %s + entries %s + unrecorded %s = %s, closing %s (totals %s)",
				first.Start, first.End, first.Opening, sum, first.Unrecorded, got, first.Closing, first.Totals.Sum())
		}
	}
}

func sameTotals(a, b ledger.StatementTotals) bool {
	return a.Granted.Equal(b.Granted) && a.Matured.Equal(b.Matured) && a.Spent.Equal(b.Spent) && a.Refunded.Equal(b.Refunded) &&
		a.Expired.Equal(b.Expired) && a.Adjusted.Equal(b.Adjusted) && a.Reversed.Equal(b.Reversed)
}
