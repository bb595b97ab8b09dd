package dynamo

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

var _ ledger.Budgets = (*Ledger)(nil)

// TestBudgetContract runs the budgets' contract on DynamoDB Local, with
// group commit and without, and audits every user after each test.
func TestBudgetContract(t *testing.T) {
	t.Parallel()
	for _, maxBatch := range []int{0, 1} {
		t.Run(map[int]string{0: "grouped", 1: "max batch 1"}[maxBatch], func(t *testing.T) {
			t.Parallel()
			ledgertest.BudgetContract(t, func(t *testing.T, now func() time.Time) ledgertest.BudgetStore {
				env := dynamotest.New(t)
				l := New(env.Client, Options{Table: env.Ledger, Now: now, MaxBatch: maxBatch})
				t.Cleanup(func() { auditUsers(t, l) })
				return l
			})
		})
	}
}

// auditUsers audits every user of l's table, if it has any (a budget's
// tests may have none).
func auditUsers(t *testing.T, l *Ledger) {
	t.Helper()
	ctx := context.Background()
	err := l.Users(ctx, 4, nil, func(user string) error {
		a, err := l.Audit(ctx, user)
		for _, f := range a.Findings {
			t.Errorf("audit of %s: %s", user, f)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}

// budgetFaults stands between the ledger and DynamoDB Local to produce
// what the emulator never does: every every-th transaction is cancelled
// with TransactionConflict (not applied), and the one after it is applied
// and its answer lost, as a reset connection loses it. It also counts the
// borrows: transactions that update budget shards alone.
type budgetFaults struct {
	API
	every   int64 // 0: no faults
	n       atomic.Int64
	borrows atomic.Int64
}

func (f *budgetFaults) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if isBorrow(in.TransactItems) {
		f.borrows.Add(1)
	}
	n := f.n.Add(1)
	if f.every > 0 && n%f.every == 0 {
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[len(reasons)-1].Code = aws.String("TransactionConflict")
		return nil, &types.TransactionCanceledException{Message: aws.String("injected conflict"), CancellationReasons: reasons}
	}
	out, err := f.API.TransactWriteItems(ctx, in, opts...)
	if err == nil && f.every > 0 && n%f.every == 1 {
		return nil, errors.New("injected: connection reset after the transaction applied")
	}
	return out, err
}

// isBorrow says whether items move remaining between a budget's shards:
// updates of shard items only.
func isBorrow(items []types.TransactWriteItem) bool {
	for _, it := range items {
		if it.Update == nil {
			return false
		}
		sk, _ := it.Update.Key["SK"].(*types.AttributeValueMemberS)
		if sk == nil || sk.Value != shardSK {
			return false
		}
	}
	return len(items) > 1
}

// grantUntilAnswered grants amount from budget to each of users at once,
// each with request_id "grant-<user>", sending a request again with the
// same request_id while its outcome is unknown (an error that is no final
// refusal), as a client retries. It returns the final answers by user.
func grantUntilAnswered(t *testing.T, l *Ledger, budget string, users []string, amount func(i int) string) map[string]answer {
	t.Helper()
	var mu sync.Mutex
	answers := map[string]answer{}
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() {
			m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "grant-" + u, Amount: amount(i), BudgetID: budget}, ledger.DefaultScale)
			if err != nil {
				t.Error(err)
				return
			}
			var res ledger.Result
			for attempt := 0; attempt < 50; attempt++ {
				res, err = l.Apply(context.Background(), m)
				if e, ok := ledger.AsError(err); err == nil || ok && e.Kind.Final() {
					break
				}
			}
			mu.Lock()
			answers[u] = answer{res, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return answers
}

// answer is what a request got in the end.
type answer struct {
	res ledger.Result
	err error
}

// Issue 26's must-show: 200 concurrent grants of 10, each to another user,
// from a budget of 1,000 give exactly 100 grants and 100 BUDGET_EXHAUSTED,
// on one budget item, and on 8 shards with conflicts and lost answers
// (retried by request_id). Afterwards granted + remaining = total,
// granted is the sum of the budget's grants, each grant is counted once,
// and every request sent again gets its answer again: a refused one the
// same refusal, even after a top-up would cover it.
func TestTwoHundredGrantsFromABudgetOfAThousand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		shards int
		every  int64
	}{
		{"one item", 1, 0},
		{"8 shards, conflicts and lost answers", 8, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := dynamotest.New(t)
			faults := &budgetFaults{API: env.Client}
			l := New(faults, Options{Table: env.Ledger})
			t.Cleanup(func() { auditUsers(t, l) })
			ledgertest.CreateBudget(t, l, "launch", "1000", tt.shards)
			faults.every = tt.every // before any grant starts
			users := ledgertest.Users("fan-", 200)
			answers := grantUntilAnswered(t, l, "launch", users, func(int) string { return "10" })
			granted, exhausted := 0, 0
			for u, a := range answers {
				switch err := a.err; ledger.ReasonOf(err) {
				case "":
					granted++
				case ledger.ReasonBudgetExhausted:
					exhausted++
				default:
					t.Errorf("grant to %s: %v", u, err)
				}
			}
			if granted != 100 || exhausted != 100 {
				t.Errorf("%d granted, %d BUDGET_EXHAUSTED; want 100 and 100", granted, exhausted)
			}
			b := ledgertest.BudgetBalances(t, l, "launch", users)
			if !b.Granted.Equal(decimal.NewFromInt(1000)) || !b.Remaining.IsZero() {
				t.Errorf("budget %+v, want all 1000 granted", b)
			}
			faults.every = 0 // every grant has answered
			topUp, _ := ledger.NewBudgetTopUp("launch", "more", "1000", ledger.DefaultScale)
			if _, _, err := l.TopUpBudget(context.Background(), topUp); err != nil {
				t.Fatal(err)
			}
			again := grantUntilAnswered(t, l, "launch", users, func(int) string { return "10" })
			for _, u := range users {
				first, second := answers[u], again[u]
				e, _ := ledger.AsError(second.err)
				switch {
				case first.err == nil && (second.err != nil || !second.res.Replayed || second.res.Entry.ID != first.res.Entry.ID):
					t.Errorf("grant to %s again: %+v, %v; want its entry %s, replayed", u, second.res, second.err, first.res.Entry.ID)
				case first.err != nil && (e == nil || e.Reason != ledger.ReasonBudgetExhausted || !e.Replayed):
					t.Errorf("refused grant to %s again: %v; want %s, replayed", u, second.err, ledger.ReasonBudgetExhausted)
				}
			}
			if b := ledgertest.BudgetBalances(t, l, "launch", users); !b.Granted.Equal(decimal.NewFromInt(1000)) {
				t.Errorf("after the replays the budget granted %s, want 1000", b.Granted)
			}
		})
	}
}

// Escrow shards that run dry at different times: 200 concurrent grants of
// 1 to 20 points from a budget of 1,000 in 8 shards, with conflicts and
// lost answers. Shards borrow; nothing is overspent; and every grant
// refused BUDGET_EXHAUSTED was more than what was left of the whole budget
// at the end, so the budget was exhausted only when all of it but less
// than one grant was granted.
func TestShardsRunDryAtDifferentTimes(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	faults := &budgetFaults{API: env.Client}
	l := New(faults, Options{Table: env.Ledger})
	t.Cleanup(func() { auditUsers(t, l) })
	ledgertest.CreateBudget(t, l, "spring", "1000", 8)
	faults.every = 11 // before any grant starts
	users := ledgertest.Users("fan-", 200)
	amount := func(i int) string { return strconv.Itoa(1 + i*7%20) }
	answers := grantUntilAnswered(t, l, "spring", users, amount)
	b := ledgertest.BudgetBalances(t, l, "spring", users)
	if b.Granted.GreaterThan(b.Total) || b.Remaining.IsNegative() {
		t.Fatalf("overspent: %+v", b)
	}
	refused := 0
	for i, u := range users {
		switch err := answers[u].err; ledger.ReasonOf(err) {
		case "":
		case ledger.ReasonBudgetExhausted:
			refused++
			if a := decimal.RequireFromString(amount(i)); !b.Remaining.LessThan(a) {
				t.Errorf("grant of %s to %s refused BUDGET_EXHAUSTED, yet %s is left", a, u, b.Remaining)
			}
		default:
			t.Errorf("grant to %s: %v", u, err)
		}
	}
	if refused == 0 {
		t.Error("no grant was refused: the test asks for more than the budget")
	}
	if faults.borrows.Load() == 0 {
		t.Error("no shard borrowed: they did not run dry")
	}
	t.Logf("%d of 200 grants refused, %s left, %d borrows", refused, b.Remaining, faults.borrows.Load())
}
