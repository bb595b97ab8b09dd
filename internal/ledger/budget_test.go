package ledger

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestDecideGrantFromBudget(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	m := mustMutation(t, EntryGrant, Request{UserID: "alice", RequestID: "g1", Amount: "10", BudgetID: "spring"})
	tests := []struct {
		name   string
		budget *BudgetRef
		kind   Kind
		reason string
	}{
		{name: "covered", budget: &BudgetRef{Status: BudgetOpen, Remaining: d("10")}},
		{name: "no such budget", budget: nil, kind: KindNotFound, reason: ReasonBudgetNotFound},
		{name: "closed", budget: &BudgetRef{Status: BudgetClosed, Remaining: d("100")}, kind: KindFailedPrecondition, reason: ReasonBudgetClosed},
		{name: "exhausted", budget: &BudgetRef{Status: BudgetOpen, Remaining: d("9.99")}, kind: KindFailedPrecondition, reason: ReasonBudgetExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dec, err := Decide(Account{}, m, now, Facts{Budget: tt.budget})
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if e := dec.Entry(); e.BudgetID != "spring" || !e.Amount.Equal(d("10")) {
					t.Errorf("entry = %+v, want a grant of 10 from budget spring", e)
				}
				return
			}
			e, ok := AsError(err)
			if !ok || e.Kind != tt.kind || e.Reason != tt.reason {
				t.Fatalf("Decide = %v, want %s", err, tt.reason)
			}
			if !e.Kind.Final() {
				t.Errorf("%s is not final: it would not be recorded", tt.reason)
			}
		})
	}
	// A grant with no budget needs no budget facts.
	plain := mustMutation(t, EntryGrant, Request{UserID: "alice", RequestID: "g2", Amount: "10"})
	if _, err := Decide(Account{}, plain, now, Facts{}); err != nil {
		t.Errorf("a grant without a budget: %v", err)
	}
}

func TestBudgetIDOnMutations(t *testing.T) {
	t.Parallel()
	if _, err := NewMutation(EntryPurchase, Request{UserID: "alice", RequestID: "p1", Amount: "1", BudgetID: "spring"}, DefaultScale); ReasonOf(err) != ReasonInvalidBudget {
		t.Errorf("a purchase with a budget_id: %v, want %s", err, ReasonInvalidBudget)
	}
	if _, err := NewMutation(EntryGrant, Request{UserID: "alice", RequestID: "g1", Amount: "1", BudgetID: "spr#ing"}, DefaultScale); ReasonOf(err) != ReasonInvalidBudget {
		t.Errorf("a budget_id with '#': %v, want %s", err, ReasonInvalidBudget)
	}
	a := mustMutation(t, EntryGrant, Request{UserID: "alice", RequestID: "g1", Amount: "1"})
	b := mustMutation(t, EntryGrant, Request{UserID: "alice", RequestID: "g1", Amount: "1", BudgetID: "spring"})
	if a.Hash() == b.Hash() {
		t.Error("a grant from a budget hashes as the same grant from none: a retry with another budget would replay")
	}
}

func TestNewBudgetCreation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, id, amount string
		shards           int
		reason           string
	}{
		{name: "default shards", id: "spring", amount: "1000"},
		{name: "sharded", id: "spring", amount: "1000", shards: MaxBudgetShards},
		{name: "too many shards", id: "spring", amount: "1000", shards: MaxBudgetShards + 1, reason: ReasonInvalidBudget},
		{name: "negative shards", id: "spring", amount: "1000", shards: -1, reason: ReasonInvalidBudget},
		{name: "no id", id: "", amount: "1000", reason: ReasonInvalidBudget},
		{name: "bad amount", id: "spring", amount: "-5", reason: ReasonInvalidAmount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewBudgetCreation(tt.id, "r1", tt.amount, "", tt.shards, DefaultScale)
			if ReasonOf(err) != tt.reason {
				t.Fatalf("NewBudgetCreation = %v, want reason %q", err, tt.reason)
			}
			if err == nil && c.Shards < 1 {
				t.Errorf("shards = %d", c.Shards)
			}
		})
	}
}

func TestSplitBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		amount string
		k      int
	}{{"1000", 1}, {"1000", 3}, {"10.01", 4}, {"1", 8}, {"999999999999.99", 64}} {
		parts := SplitBudget(d(tt.amount), tt.k)
		sum := decimal.Zero
		for _, p := range parts {
			if p.IsNegative() {
				t.Errorf("SplitBudget(%s, %d) has a negative part: %v", tt.amount, tt.k, parts)
			}
			if p.Exponent() < d(tt.amount).Exponent() && !p.Equal(p.Truncate(-d(tt.amount).Exponent())) {
				t.Errorf("SplitBudget(%s, %d): part %s is finer than the amount", tt.amount, tt.k, p)
			}
			sum = sum.Add(p)
		}
		if len(parts) != tt.k || !sum.Equal(d(tt.amount)) {
			t.Errorf("SplitBudget(%s, %d) = %v, want %d parts adding up to it", tt.amount, tt.k, parts, tt.k)
		}
	}
}

func TestBorrow(t *testing.T) {
	t.Parallel()
	ds := func(ss ...string) []decimal.Decimal {
		out := make([]decimal.Decimal, len(ss))
		for i, s := range ss {
			out[i] = d(s)
		}
		return out
	}
	tests := []struct {
		name      string
		remaining []decimal.Decimal
		target    int
		need      string
		ok        bool
	}{
		{name: "halves cover it", remaining: ds("0", "100", "50"), target: 0, need: "10", ok: true},
		{name: "halves fall short", remaining: ds("5", "10", "10"), target: 0, need: "15", ok: true},
		{name: "all of it", remaining: ds("0", "10", "10"), target: 0, need: "20", ok: true},
		{name: "not enough", remaining: ds("5", "10", "4.99"), target: 0, need: "15", ok: false},
		{name: "one shard", remaining: ds("5"), target: 0, need: "1", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			give, ok := Borrow(tt.remaining, tt.target, d(tt.need))
			if ok != tt.ok {
				t.Fatalf("Borrow ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			got := decimal.Zero
			for i, g := range give {
				if g.IsNegative() || g.GreaterThan(tt.remaining[i]) || (i == tt.target && !g.IsZero()) {
					t.Errorf("shard %d gives %s of its %s", i, g, tt.remaining[i])
				}
				got = got.Add(g)
			}
			if got.LessThan(d(tt.need)) {
				t.Errorf("borrowed %s, want at least %s", got, tt.need)
			}
		})
	}
}

func TestBudgetShard(t *testing.T) {
	t.Parallel()
	seen := map[int]int{}
	for i := range 1000 {
		s := BudgetShard("req-"+decimal.NewFromInt(int64(i)).String(), 8)
		if s < 0 || s >= 8 {
			t.Fatalf("shard %d of 8", s)
		}
		seen[s]++
	}
	if len(seen) != 8 {
		t.Errorf("1000 request ids took shards %v, want all 8", seen)
	}
	if got := BudgetShard("req-7", 1); got != 0 {
		t.Errorf("the one shard of a budget of 1 is %d", got)
	}
}

// A user's points are followed to the budgets they came from: spent oldest
// first within a bucket, expired as breakage, left over as liability.
func TestBudgetShares(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	soon := now.Add(24 * time.Hour)
	var acct Account
	var entries []Entry
	apply := func(typ EntryType, r Request, budget *BudgetRef) {
		t.Helper()
		r.UserID = "alice"
		dec, err := Decide(acct, mustMutation(t, typ, r), now, Facts{Budget: budget})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, dec.Entries...)
		acct = dec.After
		now = now.Add(time.Minute)
	}
	open := &BudgetRef{Status: BudgetOpen, Remaining: d("1000")}
	apply(EntryGrant, Request{RequestID: "a", Amount: "100", BudgetID: "A", Expire: soon}, open)
	apply(EntryGrant, Request{RequestID: "n", Amount: "50"}, nil)
	apply(EntryGrant, Request{RequestID: "b", Amount: "30", BudgetID: "B", Expire: soon}, open)
	apply(EntryGrant, Request{RequestID: "c", Amount: "40", BudgetID: "C"}, open)
	apply(EntryPurchase, Request{RequestID: "p", Amount: "120"}, nil) // A's 100, then 20 of B's 30
	shares := BudgetShares(entries, now)
	want := map[string]BudgetShare{
		"A": {Granted: d("100"), Liability: d("0"), Breakage: d("0")},
		"B": {Granted: d("30"), Liability: d("10"), Breakage: d("0")},
		"C": {Granted: d("40"), Liability: d("40"), Breakage: d("0")},
	}
	check := func(when string) {
		t.Helper()
		for id, w := range want {
			g := shares[id]
			if !g.Granted.Equal(w.Granted) || !g.Liability.Equal(w.Liability) || !g.Breakage.Equal(w.Breakage) {
				t.Errorf("%s: budget %s: %+v, want %+v", when, id, g, w)
			}
		}
	}
	check("before the expiry")
	// Past it, B's 10 left expire: breakage once the ledger says so, and
	// before it does too.
	if shares = BudgetShares(entries, soon); !shares["B"].Breakage.Equal(d("10")) || !shares["B"].Liability.IsZero() {
		t.Errorf("expired, not yet on the record: B %+v, want breakage 10", shares["B"])
	}
	now = soon.Add(time.Minute)
	apply(EntryGrant, Request{RequestID: "n2", Amount: "1"}, nil) // writes the EXPIRATION first
	shares = BudgetShares(entries, now)
	want["B"] = BudgetShare{Granted: d("30"), Liability: d("0"), Breakage: d("10")}
	check("after the expiration")
}

func TestGiveBack(t *testing.T) {
	t.Parallel()
	if _, err := NewMutation(EntryAdjustment, Request{UserID: "a", RequestID: "r", Amount: "1", BudgetID: "b", Reason: "credit"}, DefaultScale); ReasonOf(err) != ReasonInvalidBudget {
		t.Errorf("a credit adjustment with a budget_id: %v, want %s", err, ReasonInvalidBudget)
	}
	m := mustMutation(t, EntryAdjustment, Request{UserID: "a", RequestID: "r", Amount: "10", BudgetID: "b", Debit: true, Reason: "correction"})
	acct := Account{UserID: "a", Version: 1, Balance: d("50"), Status: StatusActive, Buckets: []Bucket{{Amount: d("50")}}}
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	if _, err := Decide(acct, m, now, Facts{Budget: &BudgetRef{Status: BudgetClosed, UserNet: d("10")}}); err != nil {
		t.Errorf("giving back all the user took, to a closed budget: %v", err)
	}
	if _, err := Decide(acct, m, now, Facts{Budget: &BudgetRef{Status: BudgetOpen, UserNet: d("9.99")}}); ReasonOf(err) != ReasonGiveBackExceedsGrants {
		t.Errorf("giving back more than the user took: %v, want %s", err, ReasonGiveBackExceedsGrants)
	}
	if got := BudgetNet([]Entry{{BudgetID: "b", Amount: d("30")}, {BudgetID: "c", Amount: d("5")}, {BudgetID: "b", Amount: d("-10")}}, "b"); !got.Equal(d("20")) {
		t.Errorf("BudgetNet = %s, want 20", got)
	}
}

func TestReversalGivesBack(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	acct := Account{UserID: "a", Version: 1, Status: StatusActive, Pending: d("30"),
		PendingLots: []PendingLot{{GrantRequestID: "g", Amount: d("30"), EffectiveTime: now.Add(time.Hour), Version: 1}}}
	m := mustMutation(t, EntryReversal, Request{UserID: "a", RequestID: "r", GrantRequestID: "g", Amount: "10"})
	grant := &GrantRef{Version: 1, Type: EntryGrant, Amount: d("30"), BudgetID: "b"}
	dec, err := Decide(acct, m, now, Facts{Grant: grant, Budget: &BudgetRef{Status: BudgetClosed, UserNet: d("30")}})
	if e := dec.Entry(); err != nil || e.BudgetID != "b" || !e.BudgetAmount().Equal(d("-10")) {
		t.Errorf("reversal of a pending grant from budget b: %+v, %v; want it to name b and give back 10", e, err)
	}
	if _, err := Decide(acct, m, now, Facts{Grant: grant, Budget: &BudgetRef{Status: BudgetOpen, UserNet: d("9.99")}}); ReasonOf(err) != ReasonGiveBackExceedsGrants {
		t.Errorf("giving back more than the user has of the budget: %v, want %s", err, ReasonGiveBackExceedsGrants)
	}
	noBudget := *grant
	noBudget.BudgetID = ""
	if dec, err := Decide(acct, m, now, Facts{Grant: &noBudget}); err != nil || dec.Entry().BudgetID != "" || !dec.Entry().BudgetAmount().IsZero() {
		t.Errorf("reversal of a grant from no budget: %+v, %v", dec.Entry(), err)
	}
	pendingGrant := Entry{Type: EntryGrant, BudgetID: "b", PendingChange: d("30")}
	if got := BudgetNet([]Entry{pendingGrant}, "b"); !got.Equal(d("30")) {
		t.Errorf("BudgetNet of a pending grant of 30 = %s, want 30", got)
	}
	if got := BudgetNet([]Entry{pendingGrant, dec.Entry()}, "b"); !got.Equal(d("20")) {
		t.Errorf("BudgetNet of a pending grant of 30 and its reversal of 10 = %s, want 20", got)
	}
}
