package ledgertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// BudgetStore is a store that keeps budgets beside the ledgers.
type BudgetStore interface {
	ledger.Store
	ledger.Budgets
}

// BudgetContract runs the budgets' suite every store with budgets must
// pass. newStore returns an empty store whose clock is now.
func BudgetContract(t *testing.T, newStore func(t *testing.T, now func() time.Time) BudgetStore) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, s BudgetStore)
	}{
		{"a budget is created once", budgetCreatedOnce},
		{"grants draw on their budget until it is exhausted", grantsDrawOnBudget},
		{"a closed budget gives nothing", closedBudgetGivesNothing},
		{"a grant from no budget is refused", grantFromNoBudget},
		{"concurrent grants never overspend", budgetNotOverspent(1)},
		{"concurrent grants never overspend a sharded budget", budgetNotOverspent(4)},
		{"a sharded budget is exhausted only when all of it is granted", shardsBorrow},
		{"budgets are listed by id", budgetsListed},
		{"a debit adjustment gives back to the budget", givenBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
			c.test(t, newStore(t, clk.Now))
		})
	}
	// Cases on the store's clock.
	for _, c := range []struct {
		name string
		test func(t *testing.T, s BudgetStore, clk *Clock)
	}{
		{"reversals give back to the budget, pending or matured", reversalsGiveBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clk := NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
			c.test(t, newStore(t, clk.Now), clk)
		})
	}
}

// CreateBudget creates budget id of amount in shards shards.
func CreateBudget(tb testing.TB, s ledger.Budgets, id, amount string, shards int) ledger.Budget {
	tb.Helper()
	c, err := ledger.NewBudgetCreation(id, "create-"+id, amount, "campaign "+id, shards, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	b, _, err := s.CreateBudget(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BudgetBalances checks the budget's books: granted + remaining = total,
// and granted is the sum of the amounts of users' entries that name it
// (grants, less give-backs). It returns the budget.
func BudgetBalances(tb testing.TB, s BudgetStore, id string, users []string) ledger.Budget {
	tb.Helper()
	ctx := context.Background()
	b, err := s.Budget(ctx, id)
	if err != nil {
		tb.Fatal(err)
	}
	if b.Unbalanced() != nil {
		tb.Errorf("budget %s: granted %s + remaining %s != total %s", id, b.Granted, b.Remaining, b.Total)
	}
	var mu sync.Mutex
	granted := decimal.Zero
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Go(func() {
			es, err := s.EntriesAfter(ctx, u, 0, 1000)
			if err != nil {
				tb.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			granted = granted.Add(ledger.BudgetNet(es, id))
		})
	}
	wg.Wait()
	if !granted.Equal(b.Granted) {
		tb.Errorf("budget %s: granted %s, its grants sum to %s", id, b.Granted, granted)
	}
	return b
}

func budgetCreatedOnce(t *testing.T, s BudgetStore) {
	ctx := context.Background()
	c, err := ledger.NewBudgetCreation("spring", "r1", "1000", "spring campaign", 0, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	b, replayed, err := s.CreateBudget(ctx, c)
	if err != nil || replayed {
		t.Fatalf("CreateBudget = %+v, %v, %v", b, replayed, err)
	}
	if b.ID != "spring" || !b.Total.Equal(amount("1000")) || !b.Remaining.Equal(amount("1000")) || !b.Granted.IsZero() ||
		b.Status != ledger.BudgetOpen || b.Description != "spring campaign" || b.Shards != 1 || b.CreateTime.IsZero() {
		t.Errorf("created %+v", b)
	}
	if again, replayed, err := s.CreateBudget(ctx, c); err != nil || !replayed || !again.Total.Equal(b.Total) {
		t.Errorf("the same creation again: %+v, replayed %v, %v; want the budget, replayed", again, replayed, err)
	}
	other := c
	other.Amount = amount("5")
	if _, _, err := s.CreateBudget(ctx, other); ledger.ReasonOf(err) != ledger.ReasonRequestIDReused {
		t.Errorf("another creation under r1: %v, want %s", err, ledger.ReasonRequestIDReused)
	}
	other.RequestID = "r2"
	if _, _, err := s.CreateBudget(ctx, other); ledger.ReasonOf(err) != ledger.ReasonBudgetExists {
		t.Errorf("a second budget spring: %v, want %s", err, ledger.ReasonBudgetExists)
	}
	if got, err := s.Budget(ctx, "spring"); err != nil || !got.Total.Equal(amount("1000")) {
		t.Errorf("Budget = %+v, %v; want the first creation's", got, err)
	}
	if _, err := s.Budget(ctx, "autumn"); ledger.ReasonOf(err) != ledger.ReasonBudgetNotFound {
		t.Errorf("Budget of none: %v, want %s", err, ledger.ReasonBudgetNotFound)
	}
}

func grantsDrawOnBudget(t *testing.T, s BudgetStore) {
	ctx := context.Background()
	CreateBudget(t, s, "spring", "1000", 1)
	res := Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "600", BudgetID: "spring"})
	if res.Entry.BudgetID != "spring" {
		t.Errorf("the grant's entry names budget %q, want spring", res.Entry.BudgetID)
	}
	over := ledger.Request{UserID: "b", RequestID: "g2", Amount: "400.01", BudgetID: "spring"}
	e := refused(t, s, ledger.EntryGrant, over, ledger.ReasonBudgetExhausted)
	if e.Kind != ledger.KindFailedPrecondition {
		t.Errorf("exhausted is %v, want failed_precondition", e.Kind)
	}
	// Final: the same request again is refused again, though a top-up
	// would now cover it.
	u, err := ledger.NewBudgetTopUp("spring", "t1", "100", ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if b, replayed, err := s.TopUpBudget(ctx, u); err != nil || replayed || !b.Total.Equal(amount("1100")) || !b.Remaining.Equal(amount("500")) {
		t.Fatalf("TopUpBudget = %+v, %v, %v; want total 1100, remaining 500", b, replayed, err)
	}
	if _, replayed, err := s.TopUpBudget(ctx, u); err != nil || !replayed {
		t.Errorf("the same top-up again: replayed %v, %v", replayed, err)
	}
	again := refused(t, s, ledger.EntryGrant, over, ledger.ReasonBudgetExhausted)
	if !again.Replayed {
		t.Error("the refused grant again was tried anew, not replayed")
	}
	// The refusal's facts, recorded with it and replayed (issue 31).
	for _, r := range []ledger.Error{e, again} {
		if r.Metadata["budget_id"] != "spring" || r.Metadata["remaining"] != "400" {
			t.Errorf("BUDGET_EXHAUSTED metadata %v (replayed %v), want budget_id spring, remaining 400", r.Metadata, r.Replayed)
		}
	}
	Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g3", Amount: "500", BudgetID: "spring"})
	refused(t, s, ledger.EntryGrant, ledger.Request{UserID: "c", RequestID: "g4", Amount: "0.01", BudgetID: "spring"}, ledger.ReasonBudgetExhausted)
	// A grant from no budget is as it was.
	Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "c", RequestID: "g5", Amount: "7"})
	b := BudgetBalances(t, s, "spring", []string{"a", "b", "c"})
	if !b.Granted.Equal(amount("1100")) || !b.Remaining.IsZero() {
		t.Errorf("budget %+v, want all 1100 granted", b)
	}
	for _, u := range []string{"a", "b", "c"} {
		Sound(t, s, u)
	}
}

func closedBudgetGivesNothing(t *testing.T, s BudgetStore) {
	ctx := context.Background()
	CreateBudget(t, s, "spring", "1000", 2)
	Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "10", BudgetID: "spring"})
	b, replayed, err := s.CloseBudget(ctx, "spring")
	if err != nil || replayed || b.Status != ledger.BudgetClosed {
		t.Fatalf("CloseBudget = %+v, %v, %v", b, replayed, err)
	}
	if _, replayed, err := s.CloseBudget(ctx, "spring"); err != nil || !replayed {
		t.Errorf("closing again: replayed %v, %v", replayed, err)
	}
	for i := range 4 { // whichever shard they hash to
		refused(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: fmt.Sprint("after-", i), Amount: "10", BudgetID: "spring"}, ledger.ReasonBudgetClosed)
	}
	u, _ := ledger.NewBudgetTopUp("spring", "t1", "5", ledger.DefaultScale)
	if _, _, err := s.TopUpBudget(ctx, u); ledger.ReasonOf(err) != ledger.ReasonBudgetClosed {
		t.Errorf("a top-up of a closed budget: %v, want %s", err, ledger.ReasonBudgetClosed)
	}
	if _, _, err := s.CloseBudget(ctx, "autumn"); ledger.ReasonOf(err) != ledger.ReasonBudgetNotFound {
		t.Errorf("closing none: %v, want %s", err, ledger.ReasonBudgetNotFound)
	}
	BudgetBalances(t, s, "spring", []string{"a"})
	Sound(t, s, "a")
}

func grantFromNoBudget(t *testing.T, s BudgetStore) {
	r := ledger.Request{UserID: "a", RequestID: "g1", Amount: "10", BudgetID: "autumn"}
	e := refused(t, s, ledger.EntryGrant, r, ledger.ReasonBudgetNotFound)
	if e.Kind != ledger.KindNotFound {
		t.Errorf("kind %v, want not found", e.Kind)
	}
	// Final too: creating the budget afterwards does not change the answer.
	CreateBudget(t, s, "autumn", "100", 1)
	if again := refused(t, s, ledger.EntryGrant, r, ledger.ReasonBudgetNotFound); !again.Replayed {
		t.Error("the refused grant again was tried anew")
	}
	u, _ := ledger.NewBudgetTopUp("winter", "t1", "5", ledger.DefaultScale)
	if _, _, err := s.TopUpBudget(context.Background(), u); ledger.ReasonOf(err) != ledger.ReasonBudgetNotFound {
		t.Errorf("a top-up of none: %v, want %s", err, ledger.ReasonBudgetNotFound)
	}
}

// budgetNotOverspent: 60 concurrent grants of 10, each for another user,
// from a budget of 300 in shards shards: exactly 30 are granted.
func budgetNotOverspent(shards int) func(t *testing.T, s BudgetStore) {
	return func(t *testing.T, s BudgetStore) {
		CreateBudget(t, s, "launch", "300", shards)
		users := Users("fan-", 60)
		outcomes := GrantConcurrently(t, s, "launch", users, "10")
		if outcomes[""] != 30 || outcomes[ledger.ReasonBudgetExhausted] != 30 {
			t.Errorf("outcomes %v, want 30 granted and 30 %s", outcomes, ledger.ReasonBudgetExhausted)
		}
		b := BudgetBalances(t, s, "launch", users)
		if !b.Remaining.IsZero() {
			t.Errorf("remaining %s, want 0", b.Remaining)
		}
	}
}

// GrantConcurrently grants amount from budget to each of users at once,
// each with request_id "grant-<user>", sending a grant again while its
// outcome is unknown (as answered does: on a busy machine DynamoDB Local
// may answer a transaction "too long waiting for a lock"), and counts the
// final outcomes by reason ("" for granted). Any other error fails the
// test.
func GrantConcurrently(tb testing.TB, s ledger.Store, budget string, users []string, amount string) map[string]int {
	tb.Helper()
	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Go(func() {
			m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "grant-" + u, Amount: amount, BudgetID: budget}, ledger.DefaultScale)
			if err == nil {
				err = answered(context.Background(), s, m)
			}
			reason := ledger.ReasonOf(err)
			if err != nil && reason != ledger.ReasonBudgetExhausted {
				tb.Errorf("grant to %s: %v", u, err)
			}
			mu.Lock()
			outcomes[reason]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return outcomes
}

// shardsBorrow: grants of 10 from a budget of 100 in 4 shards, one after
// the other, so that shards run dry at different times: all 10 are
// granted (a dry shard borrows), and the 11th is refused.
func shardsBorrow(t *testing.T, s BudgetStore) {
	CreateBudget(t, s, "spring", "100", 4)
	users := Users("u-", 11)
	for i, u := range users[:10] {
		if _, err := apply(t, s, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "g-" + u, Amount: "10", BudgetID: "spring"}); err != nil {
			t.Fatalf("grant %d of 10: %v", i+1, err)
		}
	}
	refused(t, s, ledger.EntryGrant, ledger.Request{UserID: users[10], RequestID: "g-last", Amount: "10", BudgetID: "spring"}, ledger.ReasonBudgetExhausted)
	if b := BudgetBalances(t, s, "spring", users); !b.Granted.Equal(amount("100")) {
		t.Errorf("granted %s, want 100", b.Granted)
	}
}

func budgetsListed(t *testing.T, s BudgetStore) {
	ctx := context.Background()
	for _, id := range []string{"c", "a", "e", "b", "d"} {
		CreateBudget(t, s, id, "10", 1)
	}
	var got []string
	token := ""
	for pages := 0; pages < 10; pages++ {
		bs, next, err := s.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageSize: 2, PageToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			got = append(got, b.ID)
		}
		if token = next; token == "" {
			break
		}
	}
	if fmt.Sprint(got) != "[a b c d e]" {
		t.Errorf("listed %v, want [a b c d e]", got)
	}
	// Budgets created between two pages: listed if they come after the
	// last one listed, and the pages after list none twice.
	first, token, err := s.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageSize: 2}})
	if err != nil || len(first) != 2 || token == "" {
		t.Fatalf("a first page of 2: %v, %q, %v", first, token, err)
	}
	CreateBudget(t, s, "aa", "10", 1)
	CreateBudget(t, s, "bb", "10", 1)
	rest, next, err := s.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageSize: 100, PageToken: token}})
	got = nil
	for _, b := range rest {
		got = append(got, b.ID)
	}
	if err != nil || next != "" || fmt.Sprint(got) != "[bb c d e]" {
		t.Errorf("the page after [a b], aa and bb created since: %v, %q, %v; want [bb c d e], the last page", got, next, err)
	}
	if _, _, err := s.ListBudgets(ctx, ledger.BudgetQuery{Page: ledger.Page{PageToken: "v1.forged"}}); ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
		t.Errorf("a forged token: %v, want %s", err, ledger.ReasonInvalidPageToken)
	}
}

// givenBack: an admin's debit adjustment that names the budget of a grant
// takes the points back from the user and gives them back to the budget,
// up to what the user's grants from it gave, to a closed budget too.
func givenBack(t *testing.T, s BudgetStore) {
	ctx := context.Background()
	CreateBudget(t, s, "spring", "100", 2)
	Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "30", BudgetID: "spring"})
	Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g2", Amount: "50"})
	back := ledger.Request{UserID: "a", RequestID: "back-1", Amount: "10", BudgetID: "spring", Debit: true, Reason: "granted twice"}
	res := Must(t, s, ledger.EntryAdjustment, back)
	if res.Entry.BudgetID != "spring" || !res.Entry.Amount.Equal(amount("-10")) {
		t.Errorf("give-back entry %+v", res.Entry)
	}
	b := BudgetBalances(t, s, "spring", []string{"a"})
	if !b.Granted.Equal(amount("20")) || !b.Remaining.Equal(amount("80")) {
		t.Errorf("after giving back 10: %+v, want 20 granted, 80 remaining", b)
	}
	over := ledger.Request{UserID: "a", RequestID: "back-2", Amount: "20.01", BudgetID: "spring", Debit: true, Reason: "too much"}
	refused(t, s, ledger.EntryAdjustment, over, ledger.ReasonGiveBackExceedsGrants)
	refused(t, s, ledger.EntryAdjustment, ledger.Request{UserID: "a", RequestID: "back-3", Amount: "1", BudgetID: "autumn", Debit: true, Reason: "none"}, ledger.ReasonBudgetNotFound)
	if _, _, err := s.CloseBudget(ctx, "spring"); err != nil {
		t.Fatal(err)
	}
	Must(t, s, ledger.EntryAdjustment, ledger.Request{UserID: "a", RequestID: "back-4", Amount: "20", BudgetID: "spring", Debit: true, Reason: "campaign cancelled"})
	if b := BudgetBalances(t, s, "spring", []string{"a"}); !b.Granted.IsZero() || !b.Remaining.Equal(amount("100")) {
		t.Errorf("after giving all back: %+v", b)
	}
	if acct := Sound(t, s, "a"); !acct.Balance.Equal(amount("50")) {
		t.Errorf("balance %s, want the 50 of no budget", acct.Balance)
	}
}

// reversalsGiveBack: a pending grant from a budget is charged to it when
// it is made, and its reversals give back what they take, pending or
// matured; the budget's books balance after every step, by the store's
// budget and by the audit of the user's entries (ledger.BudgetShares).
func reversalsGiveBack(t *testing.T, s BudgetStore, clk *Clock) {
	ctx := context.Background()
	CreateBudget(t, s, "spring", "100", 2)
	books := func(step, granted, remaining, liability string) {
		t.Helper()
		b := BudgetBalances(t, s, "spring", []string{"a"})
		if !b.Granted.Equal(amount(granted)) || !b.Remaining.Equal(amount(remaining)) {
			t.Errorf("%s: budget granted %s, remaining %s; want %s, %s", step, b.Granted, b.Remaining, granted, remaining)
		}
		Sound(t, s, "a")
		es, err := s.EntriesAfter(ctx, "a", 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		share := ledger.BudgetShares(es, clk.Now())["spring"]
		if !share.Granted.Equal(b.Granted) || !share.Liability.Equal(amount(liability)) {
			t.Errorf("%s: the audit finds %s granted from spring, %s outstanding; want %s, %s", step, share.Granted, share.Liability, b.Granted, liability)
		}
	}
	// A grant from no budget is reversed as before: no budget named.
	Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "base", Amount: "20"})
	if r := Must(t, s, ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r0", GrantRequestID: "base", Amount: "5"}); r.Entry.BudgetID != "" {
		t.Errorf("the reversal of a grant from no budget names budget %q", r.Entry.BudgetID)
	}
	books("after a reversal of a grant from no budget", "0", "100", "0")

	g := Must(t, s, ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g", Amount: "30", BudgetID: "spring", Effective: clk.Now().Add(time.Hour)})
	if !g.Entry.Amount.IsZero() || !g.Entry.PendingChange.Equal(amount("30")) || g.Entry.BudgetID != "spring" {
		t.Errorf("pending grant %+v", g.Entry)
	}
	books("after the pending grant", "30", "70", "0")

	r1 := Must(t, s, ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r1", GrantRequestID: "g", Amount: "10", Reason: "order returned"})
	if e := r1.Entry; e.BudgetID != "spring" || !e.Amount.IsZero() || !e.PendingChange.Equal(amount("-10")) || !r1.Pending.Equal(amount("20")) {
		t.Errorf("reversal while pending = %+v", r1)
	}
	books("after a reversal while pending", "20", "80", "0")

	clk.Add(time.Hour) // the grant matures before the next mutation
	r2 := Must(t, s, ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r2", GrantRequestID: "g", Amount: "5", Reason: "item returned"})
	if e := r2.Entry; e.BudgetID != "spring" || !e.Amount.Equal(amount("-5")) || !e.PendingChange.IsZero() || !r2.Balance.Equal(amount("30")) {
		t.Errorf("reversal after maturity = %+v", r2)
	}
	books("after a reversal of matured points", "15", "85", "15")

	refused(t, s, ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r3", GrantRequestID: "g", Amount: "15.01"}, ledger.ReasonReversalExceedsGrant)
	for _, r := range []struct {
		req  ledger.Request
		want ledger.Result
	}{
		{ledger.Request{UserID: "a", RequestID: "r1", GrantRequestID: "g", Amount: "10", Reason: "order returned"}, r1},
		{ledger.Request{UserID: "a", RequestID: "r2", GrantRequestID: "g", Amount: "5", Reason: "item returned"}, r2},
	} {
		if again := Must(t, s, ledger.EntryReversal, r.req); !again.Replayed || again.Entry.ID != r.want.Entry.ID || again.Entry.BudgetID != "spring" {
			t.Errorf("%s again = %+v, want %+v replayed", r.req.RequestID, again, r.want)
		}
	}
	if e := refused(t, s, ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r3", GrantRequestID: "g", Amount: "15.01"}, ledger.ReasonReversalExceedsGrant); !e.Replayed {
		t.Errorf("r3 again: %+v, want it replayed", e)
	}
	books("after the replays", "15", "85", "15")

	// An admin gave the rest back by an adjustment: a reversal of the
	// grant then has nothing left to give back to the budget, which would
	// otherwise get more than it gave.
	Must(t, s, ledger.EntryAdjustment, ledger.Request{UserID: "a", RequestID: "back", Amount: "15", BudgetID: "spring", Debit: true, Reason: "campaign cancelled"})
	refused(t, s, ledger.EntryReversal, ledger.Request{UserID: "a", RequestID: "r4", GrantRequestID: "g", Amount: "1"}, ledger.ReasonGiveBackExceedsGrants)
	books("after the adjustment gave the rest back", "0", "100", "0")
	if acct := Sound(t, s, "a"); !acct.Balance.Equal(amount("15")) || !acct.Pending.IsZero() {
		t.Errorf("account %+v, want 15 of no budget, none pending", acct)
	}
}
