package reconcile

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// The report tells the liability (points outstanding by the month they
// expire in) and the breakage (points that expired unused, by month).
func TestLiabilityAndBreakage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := t0
	store := dynamo.New(f.env.Client, dynamo.Options{Table: f.env.Ledger, Now: func() time.Time { return clk }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	grant := func(user, id, amount string, expire time.Time) {
		m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: id, Amount: amount, Expire: expire}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	grant("a", "g1", "10", t0.Add(24*time.Hour))                         // 2026-11, expires on the record below
	grant("a", "g2", "20", time.Date(2027, 1, 15, 0, 0, 0, 0, time.UTC)) // 2027-01
	grant("b", "g1", "5", t0.Add(48*time.Hour))                          // 2026-11, expires unrecorded
	grant("b", "g2", "7", time.Time{})                                   // never
	hold, err := ledger.NewMutation(ledger.EntryHold, ledger.Request{UserID: "b", RequestID: "h", Amount: "1", Expire: t0.Add(71 * time.Hour)}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(ctx, hold); err != nil { // 1 of the soonest bucket (5); the hold expires an hour before the audit
		t.Fatal(err)
	}
	clk = t0.Add(72 * time.Hour)
	if _, err := store.Expire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rec := New(store, f.history, f.leases)
	rec.now = func() time.Time { return clk }
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// b's bucket expired a day ago, and no sweeper ran: that is reported;
	// its hold expired an hour ago, within the sweep grace: that is not.
	var kinds []string
	for _, f := range rep.Findings {
		kinds = append(kinds, f.UserID+" "+f.Kind+": "+f.Found)
	}
	if want := []string{"b expiry_not_recorded: bucket of 4 expired at 2026-11-24T10:00:00Z, still on the account"}; !slices.Equal(kinds, want) {
		t.Errorf("findings %q, want %q", kinds, want)
	}
	late, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(late.Findings) != 2 || !strings.Contains(late.Findings[1].Found, `hold "h" of 1`) {
		t.Errorf("with a grace of 30 minutes, findings %v; want the bucket and the hold", late.Findings)
	}
	if _, err := store.Expire(ctx, "b"); err != nil { // what the sweeper would do
		t.Fatal(err)
	}
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wantLiability := []MonthAmount{{"2027-01", "20", "standard"}, {"never", "7", "standard"}}
	wantBreakage := []MonthAmount{{"2026-11", "15", "standard"}}
	if !rep.Clean {
		t.Errorf("after the sweep, findings: %v", rep.Findings)
	}
	if !slices.Equal(rep.Liability, wantLiability) || !slices.Equal(rep.Breakage, wantBreakage) {
		t.Errorf("liability %v, breakage %v; want %v and %v", rep.Liability, rep.Breakage, wantLiability, wantBreakage)
	}
	if !rep.Clean {
		t.Errorf("findings: %v", rep.Findings)
	}
}

// Pending points in the report: their sums, by the entries and by the
// accounts; what is still pending by the month it matures in, apart from
// the liability and the breakage, which count only matured points (a
// grant matured by time and not yet on the record among them); and a
// maturation not on the record after the sweep grace is a finding.
func TestPendingPointsInTheReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := t0
	store := dynamo.New(f.env.Client, dynamo.Options{Table: f.env.Ledger, Now: func() time.Time { return clk }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	apply := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		ledgertest.Must(t, store, typ, r)
	}
	// a: 10 maturing in an hour, expiring in December; 5 maturing in
	// January, 2 of them reversed while pending.
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "10", Effective: t0.Add(time.Hour), Expire: t0.Add(30 * 24 * time.Hour)})
	apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g2", Amount: "5", Effective: time.Date(2027, 1, 5, 0, 0, 0, 0, time.UTC)})
	apply(ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r", Amount: "2", GrantRequestID: "g2"})
	// b: 8 maturing in an hour and expiring two hours later, unspent.
	apply(ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g", Amount: "8", Effective: t0.Add(time.Hour), Expire: t0.Add(3 * time.Hour)})
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	clk = t0.Add(5 * time.Hour) // no sweeper ran: both maturities are off the record
	rec := New(store, f.history, f.leases)
	rec.now = func() time.Time { return clk }
	report := func(grace time.Duration) Report {
		t.Helper()
		rep, err := rec.Run(ctx, Options{ProjectionGrace: time.Millisecond, SweepGrace: grace})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	wantLiability := []MonthAmount{{"2026-12", "10", "standard"}}
	wantBreakage := []MonthAmount{{"2026-11", "8", "standard"}}
	wantPending := []MonthAmount{{"2027-01", "3", "standard"}}
	check := func(name string, rep Report) {
		t.Helper()
		if !slices.Equal(rep.Liability, wantLiability) || !slices.Equal(rep.Breakage, wantBreakage) || !slices.Equal(rep.Pending, wantPending) {
			t.Errorf("%s: liability %v, breakage %v, pending %v; want %v, %v and %v", name, rep.Liability, rep.Breakage, rep.Pending, wantLiability, wantBreakage, wantPending)
		}
	}

	// Within the grace, time has decided and nothing is a finding yet.
	rep := report(6 * time.Hour)
	if !rep.Clean {
		t.Errorf("within the sweep grace, findings: %v", rep.Findings)
	}
	if rep.SumOfPendingChanges != "21" || rep.SumOfPending != "21" {
		t.Errorf("pending of entries %s, of accounts %s; want 21 (10 + 3 + 8, none matured on the record)", rep.SumOfPendingChanges, rep.SumOfPending)
	}
	check("within the grace", rep)
	rep = report(2 * time.Hour)
	var kinds []string
	for _, f := range rep.Findings {
		kinds = append(kinds, f.UserID+" "+f.Kind+": "+f.Found)
	}
	want := []string{
		`a maturity_not_recorded: grant "g1" of 10 matured at 2026-11-22T11:00:00Z, still pending on the account`,
		`b maturity_not_recorded: grant "g" of 8 matured at 2026-11-22T11:00:00Z, still pending on the account`,
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("after the grace, findings %q, want %q", kinds, want)
	}

	for _, u := range []string{"a", "b"} { // what the sweeper would do
		if _, err := store.Expire(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.history.RebuildAll(ctx); err != nil {
		t.Fatal(err)
	}
	rep = report(2 * time.Hour)
	if !rep.Clean {
		t.Errorf("after the sweep, findings: %v", rep.Findings)
	}
	check("after the sweep", rep)
	if rep.SumOfPendingChanges != "3" || rep.SumOfPending != "3" {
		t.Errorf("after the sweep, pending of entries %s, of accounts %s; want 3 (a's January grant)", rep.SumOfPendingChanges, rep.SumOfPending)
	}
}

// An account whose pending is not what its entries fold to is a finding
// of its own (the audit's), and the global sums of pending disagree.
func TestAPendingSumThatDisagreesIsFound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "10", Effective: time.Now().Add(time.Hour)})
	if _, err := f.history.RebuildAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.set(t, f.env.Ledger, "u", "A", "pending", num("13"))
	rep := f.run(t, Options{})
	var kinds []string
	for _, fd := range rep.Findings {
		kinds = append(kinds, fd.UserID+" "+fd.Kind+" "+fd.Expected+" / "+fd.Found)
	}
	if rep.Clean || !slices.Contains(kinds, " "+ledger.FindingSumMismatch+" pending 10 / pending 13") {
		t.Errorf("findings %q: want the sums of pending, 10 by the entries, 13 by the accounts", kinds)
	}
	if rep.SumOfPendingChanges != "10" || rep.SumOfPending != "13" || rep.SumOfEntries != rep.SumOfBalances {
		t.Errorf("sums: entries %s balances %s, pending %s / %s", rep.SumOfEntries, rep.SumOfBalances, rep.SumOfPendingChanges, rep.SumOfPending)
	}
}
