package ledger

import (
	"testing"
	"time"
)

// The decisions of BudgetService's calls, on every state a store can read.
func TestBudgetDecisions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	c, err := NewBudgetCreation("spring", "r1", "100", "spring", 0, DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewBudgetCreation("spring", "r1", "200", "spring", 0, DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	open := c.Budget(now)
	closed, replayed := DecideBudgetClose(open)
	if replayed || closed.Status != BudgetClosed || open.Status != BudgetOpen {
		t.Fatalf("closing an open budget: %+v, replayed %v", closed, replayed)
	}
	if again, replayed := DecideBudgetClose(closed); !replayed || again != closed {
		t.Errorf("closing a closed budget: %+v, replayed %v; want it as it is, replayed", again, replayed)
	}
	u, err := NewBudgetTopUp("spring", "t1", "50", DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		decide   func() (Budget, bool, error)
		total    string // of the answer, when it is no refusal
		replayed bool
		reason   string
	}{
		{name: "create", decide: func() (Budget, bool, error) { return DecideBudgetCreation(c, nil, "", now) }, total: "100"},
		{name: "create again", decide: func() (Budget, bool, error) { return DecideBudgetCreation(c, &open, c.Hash(), now) }, total: "100", replayed: true},
		{name: "create another under its request_id", decide: func() (Budget, bool, error) { return DecideBudgetCreation(other, &open, c.Hash(), now) },
			reason: ReasonRequestIDReused},
		{name: "create one that exists", decide: func() (Budget, bool, error) { return DecideBudgetCreation(c, &open, "", now) }, reason: ReasonBudgetExists},
		{name: "top up", decide: func() (Budget, bool, error) { return DecideBudgetTopUp(u, &open, "") }, total: "150"},
		{name: "top up again", decide: func() (Budget, bool, error) { return DecideBudgetTopUp(u, &open, u.Hash()) }, total: "100", replayed: true},
		{name: "top up again, closed since", decide: func() (Budget, bool, error) { return DecideBudgetTopUp(u, &closed, u.Hash()) }, total: "100", replayed: true},
		{name: "top up under a creation's request_id", decide: func() (Budget, bool, error) { return DecideBudgetTopUp(u, &open, c.Hash()) }, reason: ReasonRequestIDReused},
		{name: "top up a closed budget", decide: func() (Budget, bool, error) { return DecideBudgetTopUp(u, &closed, "") }, reason: ReasonBudgetClosed},
		{name: "top up no budget", decide: func() (Budget, bool, error) { return DecideBudgetTopUp(u, nil, "") }, reason: ReasonBudgetNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, replayed, err := tt.decide()
			if tt.reason != "" {
				if ReasonOf(err) != tt.reason || replayed {
					t.Fatalf("= %+v, %v, %v; want %s", b, replayed, err, tt.reason)
				}
				return
			}
			if err != nil || replayed != tt.replayed || !b.Total.Equal(d(tt.total)) || b.Unbalanced() != nil {
				t.Errorf("= %+v, replayed %v, %v; want a total of %s, replayed %v, balanced", b, replayed, err, tt.total, tt.replayed)
			}
		})
	}
}

// A budget's books: granted + remaining = total after every draw and
// give-back, and the findings when they are not.
func TestBudgetAudit(t *testing.T) {
	t.Parallel()
	c, err := NewBudgetCreation("spring", "r1", "100", "", 0, DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Budget(time.Now())
	b = b.Draw(Entry{BudgetID: "spring", Type: EntryGrant, Amount: d("30")})
	b = b.Draw(Entry{BudgetID: "spring", Type: EntryGrant, PendingChange: d("20")})
	b = b.Draw(Entry{BudgetID: "spring", Type: EntryAdjustment, Amount: d("-5")})
	b = b.Draw(Entry{BudgetID: "autumn", Type: EntryGrant, Amount: d("7")})
	if !b.Granted.Equal(d("45")) || !b.Remaining.Equal(d("55")) || b.Unbalanced() != nil {
		t.Errorf("after draws of 30 and 20 (pending) and a give-back of 5: %+v, want granted 45, remaining 55, balanced", b)
	}
	if f := b.GrantsDisagree(d("45"), d("45")); f != nil {
		t.Errorf("grants that sum to granted: %+v", f)
	}
	if f := b.GrantsDisagree(d("40"), d("30")); f != nil {
		t.Errorf("grants between granted before (30) and after (45): %+v", f)
	}
	for _, sum := range []string{"29", "46"} {
		if f := b.GrantsDisagree(d(sum), d("30")); f == nil || f.Kind != FindingBudgetGranted || f.BudgetID != "spring" {
			t.Errorf("grants summing to %s, outside 30 to 45: %+v, want a %s finding", sum, f, FindingBudgetGranted)
		}
	}
	b.Remaining = b.Remaining.Add(d("1"))
	if f := b.Unbalanced(); f == nil || f.Kind != FindingBudgetUnbalanced || f.Found != "45 + 56" {
		t.Errorf("granted 45 + remaining 56 of a total of 100: %+v, want a %s finding", f, FindingBudgetUnbalanced)
	}
	if f := NoSuchBudget("gone", d("3")); f.Kind != FindingBudgetGranted || f.BudgetID != "gone" {
		t.Errorf("grants of no budget: %+v", f)
	}
}
