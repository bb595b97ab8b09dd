package memory

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/pagetoken"
	"github.com/pointledger/pointledger/internal/reconcile"
)

func TestContract(t *testing.T) {
	t.Parallel()
	ledgertest.Contract(t, func(_ *testing.T, now func() time.Time) ledger.Store { return New(now) })
}

func TestBudgetContract(t *testing.T) {
	t.Parallel()
	ledgertest.BudgetContract(t, func(_ *testing.T, now func() time.Time) ledgertest.BudgetStore { return New(now) })
}

func apply(tb testing.TB, s *Store, typ ledger.EntryType, user, id, amount, purchase string) error {
	tb.Helper()
	m, err := ledger.NewMutation(typ, ledger.Request{UserID: user, RequestID: id, Amount: amount, PurchaseRequestID: purchase}, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = s.Apply(context.Background(), m)
	return err
}

func must(tb testing.TB, s *Store, typ ledger.EntryType, user, id, amount, purchase string) {
	tb.Helper()
	if err := apply(tb, s, typ, user, id, amount, purchase); err != nil {
		tb.Fatalf("%s %s: %v", typ, id, err)
	}
}

func versions(es []ledger.Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Version
	}
	return out
}

func TestEntriesPages(t *testing.T) {
	t.Parallel()
	s := New(nil)
	ctx := context.Background()
	for i := range 7 {
		must(t, s, ledger.EntryGrant, "u1", fmt.Sprint("g", i), "1", "")
	}
	must(t, s, ledger.EntryGrant, "u2", "g", "1", "")
	for _, size := range []int{1, 3, 7, 100} {
		var got []int64
		token := ""
		for pages := 0; ; pages++ {
			if pages > 7 {
				t.Fatalf("page size %d: more pages than entries", size)
			}
			page, next, err := s.Entries(ctx, "u1", ledger.EntryQuery{Page: ledger.Page{PageSize: size, PageToken: token}})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > size {
				t.Fatalf("page size %d: a page of %d", size, len(page))
			}
			got = append(got, versions(page)...)
			if token = next; token == "" {
				break
			}
		}
		if want := []int64{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
			t.Errorf("page size %d: versions %v, want %v", size, got, want)
		}
	}

	_, next, err := s.Entries(ctx, "u1", ledger.EntryQuery{Page: ledger.Page{PageSize: 2}})
	if err != nil || next == "" {
		t.Fatalf("a first page of 2: %q, %v", next, err)
	}
	altered := []byte(next)
	altered[10] ^= 'A' ^ 'B' // another base64url digit
	tests := []struct {
		name     string
		user     string
		pageSize int
		token    string
		reason   string
	}{
		{name: "another user's token", user: "u2", token: next, reason: ledger.ReasonInvalidPageToken},
		{name: "garbage", user: "u1", token: "!!!", reason: ledger.ReasonInvalidPageToken},
		{name: "an altered token", user: "u1", token: string(altered), reason: ledger.ReasonInvalidPageToken},
		{name: "another deployment's token", user: "u1", token: pagetoken.Derived("other").Encode(2, pagetoken.EntriesRead, "u1"), reason: ledger.ReasonInvalidPageToken},
		{name: "a token of ListHistory", user: "u1", token: s.tokens.Encode(2, pagetoken.HistoryScope("u1", ledger.HistoryQuery{OldestFirst: true})...), reason: ledger.ReasonInvalidPageToken},
		{name: "with the key, negative", user: "u1", token: s.tokens.Encode(-5, pagetoken.EntriesRead, "u1"), reason: ledger.ReasonInvalidPageToken},
		{name: "with the key, at version 0", user: "u1", token: s.tokens.Encode(0, pagetoken.EntriesRead, "u1"), reason: ledger.ReasonInvalidPageToken},
		{name: "with the key, after the largest version", user: "u1", token: s.tokens.Encode(math.MaxInt64, pagetoken.EntriesRead, "u1"), reason: ledger.ReasonInvalidPageToken},
		{name: "a negative page size", user: "u1", pageSize: -1, reason: ledger.ReasonInvalidPageSize},
		{name: "no user", reason: ledger.ReasonInvalidUserID},
		{name: "a key-like user", user: "u1#E#1", reason: ledger.ReasonInvalidUserID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := s.Entries(ctx, tt.user, ledger.EntryQuery{Page: ledger.Page{PageSize: tt.pageSize, PageToken: tt.token}}); ledger.ReasonOf(err) != tt.reason {
				t.Errorf("err = %v, want %s", err, tt.reason)
			}
		})
	}
	if page, next, err := s.Entries(ctx, "nobody", ledger.EntryQuery{}); err != nil || len(page) != 0 || next != "" {
		t.Errorf("entries of a user without any: %v, %q, %v", page, next, err)
	}
}

// historyFixture is a store with a history that follows it: u1 has a grant
// then 11 purchases of 5, each refunded 1 by the next entry (23 versions, a
// second apart); u2 has a grant.
func historyFixture(t *testing.T) (*Store, *History, *ledgertest.Clock) {
	t.Helper()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := New(clk.Now)
	h := NewHistory(s)
	step := func(typ ledger.EntryType, id, amount, purchase string) {
		must(t, s, typ, "u1", id, amount, purchase)
		clk.Add(time.Second)
	}
	step(ledger.EntryGrant, "g0", "1000", "")
	for i := range 11 {
		step(ledger.EntryPurchase, fmt.Sprint("p", i), "5", "")
		step(ledger.EntryRefund, fmt.Sprint("r", i), "1", fmt.Sprint("p", i))
	}
	must(t, s, ledger.EntryGrant, "u2", "g", "3", "")
	return s, h, clk
}

// listAll pages through a user's history with q.
func listAll(t *testing.T, h *History, user string, q ledger.HistoryQuery) []ledger.Entry {
	t.Helper()
	var all []ledger.Entry
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatalf("%+v: more pages than items", q)
		}
		page, next, err := h.List(context.Background(), user, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > max(q.PageSize, 1) && q.PageSize != 0 {
			t.Fatalf("%+v: a page of %d", q, len(page))
		}
		all = append(all, page...)
		if q.PageToken = next; next == "" {
			return all
		}
	}
}

func TestHistoryListsLikeTheProjection(t *testing.T) {
	t.Parallel()
	_, h, _ := historyFixture(t)
	ctx := context.Background()
	oldest := listAll(t, h, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: ledger.MaxPageSize}, OldestFirst: true})
	if len(oldest) != 23 {
		t.Fatalf("%d items, want 23", len(oldest))
	}
	at := func(v int) time.Time { return oldest[v-1].CreateTime }
	seq := func(from, to int) []int64 { // from..to, either way
		var out []int64
		for v := from; ; {
			out = append(out, int64(v))
			if v == to {
				return out
			}
			if from < to {
				v++
			} else {
				v--
			}
		}
	}
	tests := []struct {
		name string
		q    ledger.HistoryQuery
		want []int64
	}{
		{name: "newest first, pages of 1", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 1}}, want: seq(23, 1)},
		{name: "newest first, pages of 7", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 7}}, want: seq(23, 1)},
		{name: "oldest first, pages of 7", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 7}, OldestFirst: true}, want: seq(1, 23)},
		{name: "the default page", q: ledger.HistoryQuery{}, want: seq(23, 1)},
		{name: "grants", q: ledger.HistoryQuery{Types: []ledger.EntryType{ledger.EntryGrant}}, want: []int64{1}},
		{name: "purchases, pages of 5", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 5}, Types: []ledger.EntryType{ledger.EntryPurchase}},
			want: []int64{22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2}},
		{name: "refunds and grants, oldest first", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 4}, Types: []ledger.EntryType{ledger.EntryRefund, ledger.EntryGrant}, OldestFirst: true},
			want: []int64{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}},
		{name: "a window [v11, v16)", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 2}, Start: at(11), End: at(16), OldestFirst: true}, want: seq(11, 15)},
		{name: "a window newest first", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: 2}, Start: at(11), End: at(16)}, want: seq(15, 11)},
		{name: "start a nanosecond after an entry", q: ledger.HistoryQuery{Start: at(11).Add(time.Nanosecond), End: at(13), OldestFirst: true}, want: []int64{12}},
		{name: "end a nanosecond after an entry", q: ledger.HistoryQuery{Start: at(11), End: at(13).Add(time.Nanosecond), OldestFirst: true}, want: seq(11, 13)},
		{name: "only a start", q: ledger.HistoryQuery{Start: at(21)}, want: seq(23, 21)},
		{name: "only an end", q: ledger.HistoryQuery{End: at(3), OldestFirst: true}, want: seq(1, 2)},
		{name: "purchases in a window", q: ledger.HistoryQuery{Types: []ledger.EntryType{ledger.EntryPurchase}, Start: at(4), End: at(9)}, want: []int64{8, 6, 4}},
		{name: "expirations", q: ledger.HistoryQuery{Types: []ledger.EntryType{ledger.EntryExpiration}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := versions(listAll(t, h, "u1", tt.q)); !slices.Equal(got, tt.want) {
				t.Errorf("versions %v, want %v", got, tt.want)
			}
		})
	}

	// Each purchase carries the refund after it; u2's grant is u2's alone.
	for _, e := range oldest {
		if e.Type == ledger.EntryPurchase && !e.RefundedAmount.Equal(decimal.NewFromInt(1)) {
			t.Errorf("purchase %d: refunded %s, want 1", e.Version, e.RefundedAmount)
		}
	}
	if u2 := listAll(t, h, "u2", ledger.HistoryQuery{}); len(u2) != 1 || u2[0].UserID != "u2" {
		t.Errorf("u2's history = %v, want its grant", u2)
	}
	st, err := h.State(ctx, "u1")
	if err != nil || st.Version != 23 || st.Balance.String() != "956" || st.Spent.String() != "55" || st.Refunded.String() != "11" {
		t.Errorf("state = %+v, %v; want version 23, balance 1000-55+11 = 956, spent 55, refunded 11", st, err)
	}

	checkHistoryRefusals(t, h, at)
}

// checkHistoryRefusals checks that h refuses, as invalid, page tokens made
// for other queries, users or lists, and bad filters; at(v) is the time of
// u1's entry v.
func checkHistoryRefusals(t *testing.T, h *History, at func(int) time.Time) {
	t.Helper()
	ctx := context.Background()
	_, next, err := h.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: 2}})
	if err != nil || next == "" {
		t.Fatalf("a first page of 2: %q, %v", next, err)
	}
	refused := []struct {
		name   string
		user   string
		q      ledger.HistoryQuery
		reason string
	}{
		{name: "token with other filters", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: next}, OldestFirst: true}, reason: ledger.ReasonInvalidPageToken},
		{name: "token with another type", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: next}, Types: []ledger.EntryType{ledger.EntryGrant}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token of another user", user: "u2", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: next}}, reason: ledger.ReasonInvalidPageToken},
		{name: "garbage token", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: "zzz"}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token of ListEntries", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: h.tokens.Encode(3, pagetoken.EntriesRead, "u1")}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token with the key, before version 1, newest first", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: h.tokens.Encode(1, pagetoken.HistoryScope("u1", ledger.HistoryQuery{})...)}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token with the key, at the largest version", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageToken: h.tokens.Encode(math.MaxInt64, pagetoken.HistoryScope("u1", ledger.HistoryQuery{OldestFirst: true})...)}, OldestFirst: true}, reason: ledger.ReasonInvalidPageToken},
		{name: "negative page size", user: "u1", q: ledger.HistoryQuery{Page: ledger.Page{PageSize: -1}}, reason: ledger.ReasonInvalidPageSize},
		{name: "end before start", user: "u1", q: ledger.HistoryQuery{Start: at(5), End: at(4)}, reason: ledger.ReasonInvalidFilter},
		{name: "unknown type", user: "u1", q: ledger.HistoryQuery{Types: []ledger.EntryType{"BONUS"}}, reason: ledger.ReasonInvalidFilter},
		{name: "no user", user: "", reason: ledger.ReasonInvalidUserID},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := h.List(ctx, tt.user, tt.q); err == nil {
				t.Error("no error")
			} else if e, ok := ledger.AsError(err); !ok || e.Kind != ledger.KindInvalid || e.Reason != tt.reason {
				t.Errorf("%v, want an invalid-argument error %s", err, tt.reason)
			}
		})
	}
}

// A history that starts following a store late stays behind for the users
// it missed, until rebuilt; a rebuild of a history in step changes nothing
// but that it was written.
func TestHistoryRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, followed, _ := historyFixture(t)
	late := NewHistory(s)
	must(t, s, ledger.EntryPurchase, "u1", "p-late", "4", "")
	must(t, s, ledger.EntryGrant, "u3", "g", "2", "")
	if st, _ := late.State(ctx, "u1"); st.Version != 0 {
		t.Errorf("a late history's u1 is at version %d, want 0 (behind, until rebuilt)", st.Version)
	}
	if st, _ := late.State(ctx, "u3"); st.Version != 1 {
		t.Errorf("a late history's u3 is at version %d, want 1 (all its entries followed)", st.Version)
	}
	n, err := late.RebuildAll(ctx)
	if err != nil || n != 3 {
		t.Fatalf("rebuild all: %d, %v; want 3 users", n, err)
	}
	before := followed.Snapshot()
	if err := followed.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	after := followed.Snapshot()
	added, changed, removed := before.Diff(after)
	if len(added) != 0 || len(removed) != 0 || !slices.Equal(changed, []string{`history "u1" state`}) {
		t.Errorf("a rebuild of a history in step: added %v, changed %v, removed %v; want only u1's state (its writes)", added, changed, removed)
	}
	// The late history, rebuilt, has what the one that followed has, but
	// for how often each state was written.
	rebuilt := late.Snapshot()
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if strings.HasSuffix(k, " state") {
			rebuilt[k], _, _ = strings.Cut(rebuilt[k], " writes ")
			after[k], _, _ = strings.Cut(after[k], " writes ")
		}
		if rebuilt[k] != after[k] {
			t.Errorf("%s: rebuilt %s, followed %s", k, rebuilt[k], after[k])
		}
	}
	if err := followed.Rebuild(ctx, "nobody"); err != nil || len(followed.Snapshot()) != len(after) {
		t.Errorf("rebuild of a user without entries: %v, or it wrote", err)
	}
}

func TestSnapshotChangesOnEveryWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := New(clk.Now)
	mutation := func(typ ledger.EntryType, r ledger.Request) ledger.Mutation {
		m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	grant := mutation(ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "10", Expire: clk.Now().Add(time.Hour)})
	tests := []struct {
		name                   string
		call                   func() error
		added, changed, refuse int // how many records it adds and changes; refusal records among the added
	}{
		{name: "a grant", call: func() error { _, err := s.Apply(ctx, grant); return err }, added: 3},
		{name: "its replay", call: func() error { _, err := s.Apply(ctx, grant); return err }},
		{name: "a refused purchase", call: func() error {
			_, err := s.Apply(ctx, mutation(ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "p", Amount: "11"}))
			return want(err, ledger.ReasonInsufficientBalance)
		}, added: 1, refuse: 1},
		{name: "the refusal replayed", call: func() error {
			_, err := s.Apply(ctx, mutation(ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "p", Amount: "11"}))
			return want(err, ledger.ReasonInsufficientBalance)
		}},
		{name: "a request id reused", call: func() error {
			_, err := s.Apply(ctx, mutation(ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "g", Amount: "1"}))
			return want(err, ledger.ReasonRequestIDReused)
		}},
		{name: "a refund of nothing", call: func() error {
			_, err := s.Apply(ctx, mutation(ledger.EntryRefund, ledger.Request{UserID: "u", RequestID: "r", Amount: "1", PurchaseRequestID: "none"}))
			return want(err, ledger.ReasonPurchaseNotFound)
		}, added: 1, refuse: 1},
		{name: "a purchase", call: func() error {
			_, err := s.Apply(ctx, mutation(ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: "p2", Amount: "4"}))
			return err
		}, added: 2, changed: 1},
		{name: "a refund of it", call: func() error {
			_, err := s.Apply(ctx, mutation(ledger.EntryRefund, ledger.Request{UserID: "u", RequestID: "r2", Amount: "1", PurchaseRequestID: "p2"}))
			return err
		}, added: 2, changed: 2}, // the account and the purchase's refunded amount
		{name: "reads", call: func() error {
			_, err := s.Balance(ctx, "u")
			if err == nil {
				_, _, err = s.Entries(ctx, "u", ledger.EntryQuery{})
			}
			return err
		}},
		{name: "a freeze", call: func() error { _, _, err := s.SetStatus(ctx, "u", ledger.StatusFrozen, "review"); return err }, changed: 1},
		{name: "a freeze again", call: func() error { _, _, err := s.SetStatus(ctx, "u", ledger.StatusFrozen, "review"); return err }},
		{name: "nothing due to expire", call: func() error { _, err := s.Expire(ctx, "u"); return err }},
		{name: "an expiration", call: func() error {
			clk.Add(time.Hour)
			_, err := s.Expire(ctx, "u")
			return err
		}, added: 1, changed: 1},
	}
	for _, tt := range tests { // in order: each builds on the one before
		before := s.Snapshot()
		if err := tt.call(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		added, changed, removed := before.Diff(s.Snapshot())
		refusals := 0
		for _, k := range added {
			if strings.HasPrefix(s.Snapshot()[k], RefusalPrefix) {
				refusals++
			}
		}
		if len(added) != tt.added || len(changed) != tt.changed || len(removed) != 0 || refusals != tt.refuse {
			t.Errorf("%s: added %v (%d refusals), changed %v, removed %v; want %d added (%d refusals), %d changed",
				tt.name, added, refusals, changed, removed, tt.added, tt.refuse, tt.changed)
		}
	}
}

// want is nil when err has the reason, else an error that says so.
func want(err error, reason string) error {
	if ledger.ReasonOf(err) != reason {
		return fmt.Errorf("%w, want %s", err, reason)
	}
	return nil
}

// reconciler is package reconcile's, over s and h, on s's clock.
func reconciler(s *Store, h *History) *reconcile.Reconciler {
	r := reconcile.New(s, h, NewLeases(s.now))
	r.SetClock(s.now)
	return r
}

// Reconciliation over the memory store is package reconcile's, as over
// DynamoDB: a sound ledger is clean, a history behind is found and
// repaired, an account off its entries is found, an invalid user refused.
func TestReconciler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, h, _ := historyFixture(t)
	late := NewHistory(s) // behind on u1 and u2
	var progress []reconcile.Progress
	rep, err := reconciler(s, h).Run(ctx, reconcile.Options{Progress: func(p reconcile.Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean || rep.Users != 2 || rep.Entries != 24 || rep.SumOfEntries != "959" || rep.SumOfBalances != "959" || len(rep.Findings) != 0 {
		t.Errorf("report = %+v, want clean, 2 users, 24 entries, sums 959", rep)
	}
	// Package reconcile reports progress on a ticker and once at the end.
	if n := len(progress); n == 0 || progress[n-1].Users != 2 || progress[n-1].TotalUsers != 2 || progress[n-1].Entries != 24 {
		t.Errorf("progress = %+v, want it ending at 2 of 2, 24 entries", progress)
	}

	// A history behind is a finding once ProjectionGrace is over: 1 ms
	// here, for a history that never catches up.
	behind, err := reconciler(s, late).Run(ctx, reconcile.Options{User: "u2", ProjectionGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kinds := func(fs []ledger.Finding) (out []string) {
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s %s repaired %v", f.UserID, f.Kind, f.Repaired))
		}
		return out
	}
	if got, want := kinds(behind.Findings), []string{"u2 projection_missing repaired false", "u2 projection_state repaired false"}; behind.Clean || !slices.Equal(got, want) {
		t.Errorf("a history behind: clean %v, findings %v; want %v", behind.Clean, got, want)
	}
	repaired, err := reconciler(s, late).Run(ctx, reconcile.Options{RepairProjection: true, ProjectionGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(repaired.Findings); !repaired.Clean || len(got) != 4 || !strings.HasSuffix(got[0], "repaired true") || !strings.HasSuffix(got[3], "repaired true") {
		t.Errorf("repaired: clean %v, findings %v; want 4, all repaired", repaired.Clean, got)
	}

	// An account off its entries (no store writes one; this one is set by hand).
	s.mu.Lock()
	s.users["u2"].acct.Balance = decimal.NewFromInt(4)
	s.mu.Unlock()
	off, err := reconciler(s, h).Run(ctx, reconcile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(off.Findings), []string{" sum_mismatch repaired false", "u2 balance_mismatch repaired false"}; off.Clean || !slices.Equal(got, want) || off.SumOfBalances != "960" {
		t.Errorf("an account off its entries: clean %v, findings %v, sum of balances %s; want %v, 960", off.Clean, got, off.SumOfBalances, want)
	}
	if _, err := reconciler(s, h).Run(ctx, reconcile.Options{User: "u#1"}); ledger.ReasonOf(err) != ledger.ReasonInvalidUserID {
		t.Errorf("a reconciliation of an invalid user: %v", err)
	}
}

// A capture is refundable as a purchase is: a rebuilt history counts its
// refunds once, not once from the stored entry and again from each refund.
func TestHistoryRebuildCountsACapturesRefundsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	s := New(clk.Now)
	h := NewHistory(s)
	do := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, m); err != nil {
			t.Fatalf("%s %s: %v", typ, r.RequestID, err)
		}
	}
	do(ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: "g", Amount: "100"})
	do(ledger.EntryHold, ledger.Request{UserID: "u", RequestID: "h", Amount: "30", Expire: clk.Now().Add(time.Hour)})
	do(ledger.EntryCapture, ledger.Request{UserID: "u", RequestID: "c", HoldRequestID: "h", Amount: "30"})
	do(ledger.EntryRefund, ledger.Request{UserID: "u", RequestID: "r", Amount: "10", PurchaseRequestID: "c"})
	if err := h.Rebuild(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	captures := 0
	for _, e := range listAll(t, h, "u", ledger.HistoryQuery{OldestFirst: true}) {
		if e.Type != ledger.EntryCapture {
			continue
		}
		captures++
		if !e.RefundedAmount.Equal(decimal.NewFromInt(10)) {
			t.Errorf("the rebuilt capture's refunded amount is %s, want 10", e.RefundedAmount)
		}
	}
	if captures != 1 {
		t.Errorf("the rebuilt history lists %d captures, want 1", captures)
	}
}

// The memory store's history and reconciliation keep pending grants and
// reversals as the DynamoDB ones do: a grant's history item counts its
// reversals (live and rebuilt), and the report has both sums of pending.
// The users and figures are TestPendingPointsInTheReport's in package
// reconcile, which runs them on the emulator: the same sums, 21 and 21.
func TestReconcilerPendingAndReversals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := ledgertest.NewClock(t0)
	s := New(clk.Now)
	h := NewHistory(s)
	do := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, m); err != nil {
			t.Fatalf("%s %s: %v", typ, r.RequestID, err)
		}
	}
	do(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "10", Effective: t0.Add(time.Hour), Expire: t0.Add(30 * 24 * time.Hour)})
	do(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g2", Amount: "5", Effective: time.Date(2027, 1, 5, 0, 0, 0, 0, time.UTC)})
	do(ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r", Amount: "2", GrantRequestID: "g2"})
	do(ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g", Amount: "8", Effective: t0.Add(time.Hour), Expire: t0.Add(3 * time.Hour)})
	clk.Add(5 * time.Hour) // no sweeper ran: both maturities are off the record

	reversed := func(when string) {
		t.Helper()
		for _, e := range listAll(t, h, "a", ledger.HistoryQuery{OldestFirst: true}) {
			if e.Type == ledger.EntryGrant && e.RequestID == "g2" && !e.ReversedAmount.Equal(decimal.NewFromInt(2)) {
				t.Errorf("%s: grant g2's history item has %s reversed, want 2", when, e.ReversedAmount)
			}
		}
	}
	reversed("as applied")
	rep, err := reconciler(s, h).Run(ctx, reconcile.Options{SweepGrace: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean || rep.SumOfPendingChanges != "21" || rep.SumOfPending != "21" {
		t.Errorf("report: clean %v, findings %v, pending of entries %q, of accounts %q; want clean, 21 and 21 (10 + 3 + 8)", rep.Clean, rep.Findings, rep.SumOfPendingChanges, rep.SumOfPending)
	}
	if err := h.Rebuild(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	reversed("rebuilt")

	// An account whose pending is not what its entries fold to (no store
	// writes one; this one is set by hand): the sums of pending disagree.
	s.mu.Lock()
	s.users["b"].acct.Pending = decimal.NewFromInt(13)
	s.mu.Unlock()
	off, err := reconciler(s, h).Run(ctx, reconcile.Options{SweepGrace: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var mismatch bool
	for _, f := range off.Findings {
		mismatch = mismatch || (f.Kind == ledger.FindingSumMismatch && f.Expected == "pending 21" && f.Found == "pending 26")
	}
	if off.Clean || !mismatch {
		t.Errorf("pending off its entries: findings %v, want a sum_mismatch of pending 21 / 26", off.Findings)
	}
}

// Reconciliation over the memory store reports its budgets, and finds a
// budget whose books do not balance.
func TestReconcilerBudgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := ledgertest.NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	s := New(clk.Now)
	h := NewHistory(s)
	ledgertest.CreateBudget(t, s, "spring", "100", 1)
	for i, u := range []string{"a", "b"} {
		m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "30", BudgetID: "spring"}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := reconciler(s, h).Run(ctx, reconcile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Budgets) != 1 || rep.Budgets[0].Granted != "60" || rep.Budgets[0].GrantsSum != "60" || rep.Budgets[0].Remaining != "40" || !rep.Clean {
		t.Errorf("budgets %+v, findings %v; want spring granted 60 (and its grants), 40 remaining, clean", rep.Budgets, rep.Findings)
	}
	s.mu.Lock()
	s.budgets["spring"].Remaining = decimal.NewFromInt(41) // no store writes it; set by hand
	s.mu.Unlock()
	off, err := reconciler(s, h).Run(ctx, reconcile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if off.Clean || len(off.Findings) != 1 || off.Findings[0].Kind != ledger.FindingBudgetUnbalanced || off.Findings[0].BudgetID != "spring" {
		t.Errorf("a budget off its total: findings %v, want one %s of spring", off.Findings, ledger.FindingBudgetUnbalanced)
	}
}

func TestKindContract(t *testing.T) {
	t.Parallel()
	ledgertest.KindContract(t, func(_ *testing.T, now func() time.Time) ledgertest.KindStore { return New(now) })
}
