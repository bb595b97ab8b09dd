package check

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

// program is the kinds scenario's program: campaign points spent first,
// store-only points, points barred from exchange.
var program = ledger.NewKinds(
	ledger.PointKind{ID: "lt-campaign", Priority: 10},
	ledger.PointKind{ID: "lt-store-a", Priority: 30, Merchants: []string{"shop-a"}},
	ledger.PointKind{ID: "lt-no-exchange", Priority: 40, ExcludedCategories: []string{"exchange"}},
)

// kindedEntries decides, as the ledger does, grants of each kind and a
// few purchases at merchants and in categories, and returns the entries.
func kindedEntries(t *testing.T) []ledger.Entry {
	t.Helper()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	acct := ledger.NewAccount("u")
	var entries []ledger.Entry
	for i, r := range []struct {
		typ ledger.EntryType
		req ledger.Request
	}{
		{ledger.EntryGrant, ledger.Request{Amount: "50"}},
		{ledger.EntryGrant, ledger.Request{Amount: "20", Kind: "lt-campaign", Expire: t0.Add(72 * time.Hour)}},
		{ledger.EntryGrant, ledger.Request{Amount: "20", Kind: "lt-store-a"}},
		{ledger.EntryGrant, ledger.Request{Amount: "20", Kind: "lt-no-exchange"}},
		{ledger.EntryPurchase, ledger.Request{Amount: "30", MerchantID: "shop-a", Category: "food"}},     // campaign 20, store-a 10
		{ledger.EntryPurchase, ledger.Request{Amount: "10", MerchantID: "mall-1", Category: "exchange"}}, // standard only
		{ledger.EntryPurchase, ledger.Request{Amount: "5", Category: "food"}},                            // no-exchange
	} {
		r.req.UserID, r.req.RequestID = "u", fmt.Sprint("r", i)
		m, err := ledger.NewMutation(r.typ, r.req, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ledger.Decide(acct, m, t0.Add(time.Duration(i)*time.Second), ledger.Facts{Kinds: program})
		if err != nil {
			t.Fatalf("%s %+v: %v", r.typ, r.req, err)
		}
		entries = append(entries, d.Entries...)
		acct = d.After
	}
	return entries
}

// The ledger's own draws pass; a hand-made draw of store-a points at
// another merchant, of no-exchange points on an exchange, and of a kind
// nobody made each fail the check.
func TestIneligibleDraws(t *testing.T) {
	t.Parallel()
	entries := kindedEntries(t)
	n, bad := IneligibleDraws("u", entries, program)
	if n != 4 || len(bad) != 0 {
		t.Fatalf("the ledger's own draws: %d checked, violations %q; want 4 checked, none", n, bad)
	}
	broken := func(i int, kind string) []ledger.Entry {
		out := append([]ledger.Entry(nil), entries...)
		out[i].Draws = append([]ledger.Draw(nil), out[i].Draws...)
		out[i].Draws[0].Kind = kind
		return out
	}
	for _, c := range []struct {
		entry int
		kind  string
		want  string
	}{
		{5, "lt-store-a", `u: PURCHASE 6 at merchant "mall-1" in category "exchange" drew 10 of kind lt-store-a, which is not eligible there`},
		{5, "lt-no-exchange", `drew 10 of kind lt-no-exchange, which is not eligible there`},
		{6, "lt-gone", `u: PURCHASE 7 drew 5 of kind "lt-gone", which the ledger does not know`},
	} {
		_, bad := IneligibleDraws("u", broken(c.entry, c.kind), program)
		if len(bad) != 1 || !strings.Contains(bad[0], c.want) {
			t.Errorf("a draw of %s in entry %d: violations %q, want one saying %q", c.kind, c.entry+1, bad, c.want)
		}
	}
}

// GetBalance's kinds equal to the fold's pass; one point more of a kind,
// a kind GetBalance lacks, or one it has that the fold lacks, each fail.
func TestKindBalancesDiffer(t *testing.T) {
	t.Parallel()
	folded, _, err := ledger.Fold("u", kindedEntries(t))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 1, 0, 0, 0, time.UTC)
	answer := func() []*pb.KindBalance {
		var out []*pb.KindBalance
		for _, kb := range folded.KindBalances(now, program) {
			out = append(out, &pb.KindBalance{Kind: ledger.KindName(kb.Kind), Balance: kb.Balance.StringFixed(2),
				Available: kb.Available.String(), Held: kb.Held.String(), Pending: kb.Pending.String()})
		}
		return out
	}
	if got := answer(); len(got) != 3 {
		t.Fatalf("the fold's kinds: %v, want standard, store-a and no-exchange (the campaign's are spent)", got)
	}
	if bad := KindBalancesDiffer("u", folded, now, program, answer()); len(bad) != 0 {
		t.Fatalf("GetBalance as the fold: violations %q", bad)
	}
	more := answer()
	more[0].Balance = "11"
	lacking := answer()[1:]
	extra := append(answer(), &pb.KindBalance{Kind: "lt-campaign", Balance: "1", Available: "1", Held: "0", Pending: "0"})
	for name, c := range map[string]struct {
		got  []*pb.KindBalance
		want string
	}{
		"one point more": {more, "GetBalance has kind lt-store-a at balance 11, available 10, held 0, pending 0, the fold of the entries balance 10"},
		"a kind lacking": {lacking, "the fold of the entries has kind lt-store-a (balance 10, available 10, held 0, pending 0), GetBalance none of it"},
		"a kind extra":   {extra, "GetBalance has kind lt-campaign (balance 1, available 1, held 0, pending 0), the fold of the entries has none of it"},
	} {
		bad := KindBalancesDiffer("u", folded, now, program, c.got)
		if len(bad) != 1 || !strings.Contains(bad[0], c.want) {
			t.Errorf("%s: violations %q, want one saying %q", name, bad, c.want)
		}
	}
}
