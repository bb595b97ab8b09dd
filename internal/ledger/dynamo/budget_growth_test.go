package dynamo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// stormRetry retries throttles sooner than DefaultRetry, whose waits suit
// a partition's refill at scale 1, so that the storm takes seconds.
var stormRetry = Retry{Backoff: DefaultRetry.Backoff, Throttled: Backoff{MaxAttempts: 10, BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond}}

// growthObserver counts the budgets grown.
type growthObserver struct{ grown atomic.Int64 }

func (*growthObserver) GroupCommitted(int)     {}
func (*growthObserver) Retried(string)         {}
func (o *growthObserver) BudgetGrown(_, _ int) { o.grown.Add(1) }

// A budget of one shard under a storm of grants, through the proxy's
// partition limits at 0.02 (one shard takes about 10 grants a second),
// from two processes (two Ledgers on one table, each with its own count
// of shards): its shard is throttled, the budget grows, the new shards
// borrow, and exactly the total is granted, no more: every grant of 1
// up to it is acknowledged, every one past it refused BUDGET_EXHAUSTED,
// and granted + remaining = total over all shards, as a reconciliation
// reads them.
func TestBudgetGrowsWhenThrottled(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Limits: ddbproxy.Limits{PartitionScale: 0.02}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	growth := BudgetGrowth{Throttles: 3, Window: time.Second}
	var obs growthObserver
	var ledgers []*Ledger
	for range 2 {
		ledgers = append(ledgers, New(dynamolocal.NewClient(p.URL), Options{Table: env.Ledger, BudgetGrowth: growth, Observer: &obs, Retry: stormRetry,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	}
	const total, asked = 20, 30
	ledgertest.CreateBudget(t, ledgers[0], "launch", fmt.Sprint(total), 1)

	var granted, exhausted atomic.Int64
	var wg sync.WaitGroup
	for i := range asked {
		wg.Go(func() {
			m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: fmt.Sprint("u", i), RequestID: "g", Amount: "1", BudgetID: "launch"}, ledger.DefaultScale)
			if err != nil {
				t.Error(err)
				return
			}
			switch _, err := untilFinal(ledgers[i%2], m); {
			case err == nil:
				granted.Add(1)
			case ledger.ReasonOf(err) == ledger.ReasonBudgetExhausted:
				exhausted.Add(1)
			default:
				t.Errorf("grant to u%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if p.Stats().Throttled() == 0 {
		t.Fatal("the proxy throttled nothing: the test did not test throttling")
	}
	b, err := ledgers[1].Budget(context.Background(), "launch")
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("grown %d times to %d shards; %d transactions, %d conflicts, throttled %v", obs.grown.Load(), b.Shards, st.Transactions, st.Conflicts, st.Throttles)
	if b.Shards < 2 || obs.grown.Load() == 0 {
		t.Errorf("the budget has %d shards after %d growths, want it grown", b.Shards, obs.grown.Load())
	}
	if granted.Load() != total || exhausted.Load() != asked-total {
		t.Errorf("%d grants acknowledged and %d refused BUDGET_EXHAUSTED, want %d and %d", granted.Load(), exhausted.Load(), total, asked-total)
	}
	if !b.Granted.Equal(decimal.NewFromInt(total)) || !b.Remaining.IsZero() || !b.Total.Equal(decimal.NewFromInt(total)) {
		t.Errorf("budget granted %s, remaining %s of %s: want all %d granted", b.Granted, b.Remaining, b.Total, total)
	}
	assertShardItems(t, env, "launch", b.Shards)
	auditUsers(t, ledgers[0])
}

// Two processes that grow one budget at once, each from the count it
// read: one grows it, the other's transaction is cancelled and it takes
// the count the budget has, so both agree with the budget item, which
// agrees with the shard items; round after round, up to the 64 shards.
func TestBudgetGrowthRaceEndsWithOneCount(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	ctx := context.Background()
	var obs growthObserver
	a := New(env.Client, Options{Table: env.Ledger, Observer: &obs})
	b := New(env.Client, Options{Table: env.Ledger, Observer: &obs})
	ledgertest.CreateBudget(t, a, "race", "1000", 1)
	for round, from := range []int{1, 2, 4, 8, 16, 32, ledger.MaxBudgetShards} {
		want := min(2*from, ledger.MaxBudgetShards)
		for _, l := range []*Ledger{a, b} {
			if got, err := l.Budget(ctx, "race"); err != nil || got.Shards != from {
				t.Fatalf("round %d: before, a process reads %+v, %v; want %d shards", round, got, err, from)
			}
		}
		before := obs.grown.Load()
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, l := range []*Ledger{a, b} {
			wg.Go(func() {
				<-start
				if err := l.growBudget(ctx, "race"); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		close(start)
		wg.Wait()
		wantGrew := int64(1)
		if from == ledger.MaxBudgetShards {
			wantGrew = 0
		}
		if grew := obs.grown.Load() - before; grew != wantGrew {
			t.Errorf("round %d: %d processes grew the budget from %d shards, want %d", round, grew, from, wantGrew)
		}
		for _, l := range []*Ledger{a, b} {
			if k, _, _ := l.budgetShards(ctx, "race"); k != want {
				t.Errorf("round %d: a process counts %d shards, want %d", round, k, want)
			}
		}
		got, err := a.Budget(ctx, "race")
		if err != nil || got.Shards != want || !got.Granted.Add(got.Remaining).Equal(got.Total) || !got.Total.Equal(decimal.NewFromInt(1000)) {
			t.Errorf("round %d: budget %+v, %v; want %d shards, granted + remaining = total 1000", round, got, err, want)
		}
		assertShardItems(t, env, "race", want)
	}
}

// assertShardItems checks budget id has shard items 0..k-1 and no shard k.
func assertShardItems(t *testing.T, env *dynamotest.Env, id string, k int) {
	t.Helper()
	for n := range k + 1 {
		out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &env.Ledger, Key: shardKey(id, n), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if exists := len(out.Item) > 0; exists != (n < k) {
			t.Errorf("budget %s with %d shards: shard %d exists: %v", id, k, n, exists)
		}
	}
}

// untilFinal applies m as a client does: again, with the same request_id,
// while the answer is one that says to retry (unavailable THROTTLED,
// aborted TOO_MANY_CONFLICTS).
func untilFinal(l *Ledger, m ledger.Mutation) (ledger.Result, error) {
	for {
		res, err := l.Apply(context.Background(), m)
		if e, ok := ledger.AsError(err); ok && (e.Kind == ledger.KindUnavailable || e.Kind == ledger.KindAborted) {
			time.Sleep(10 * time.Millisecond) // a client's pause, not a wait for anything
			continue
		}
		return res, err
	}
}
