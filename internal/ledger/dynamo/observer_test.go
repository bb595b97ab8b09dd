package dynamo

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// recordingObserver keeps what the write path told it.
type recordingObserver struct {
	mu      sync.Mutex
	groups  []int
	retries []string
}

func (o *recordingObserver) BudgetGrown(int, int) {}

func (o *recordingObserver) GroupCommitted(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.groups = append(o.groups, n)
}

func (o *recordingObserver) Retried(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries = append(o.retries, reason)
}

func TestObserverHearsRetriesByReason(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code string
		want string
	}{
		{code: "TransactionConflict", want: RetryTransactionConflict},
		{code: "ThrottlingError", want: RetryThrottled},
	} {
		t.Run(tt.code, func(t *testing.T) {
			t.Parallel()
			env := dynamotest.New(t)
			inj := &conflictInjector{API: env.Client, conflicts: 0}
			obs := &recordingObserver{}
			l := New(inj, Options{Table: env.Ledger, Retry: fastRetry, Observer: obs})
			mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "grant", "100"))
			inj.transactions.Store(0)
			inj.conflicts, inj.code = 2, tt.code
			mustApply(t, l, mutation(t, ledger.EntryPurchase, "u1", "buy", "30"))

			obs.mu.Lock()
			defer obs.mu.Unlock()
			if want := []string{tt.want, tt.want}; !slices.Equal(obs.retries, want) {
				t.Errorf("retries = %q, want %q", obs.retries, want)
			}
			if want := []int{1, 1}; !slices.Equal(obs.groups, want) {
				t.Errorf("groups committed = %v, want %v (the grant, then the purchase)", obs.groups, want)
			}
		})
	}
}

// Every committed transaction is one group observation, and the groups add
// up to the mutations committed.
func TestObserverHearsEveryGroup(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	counter := &transactionCounter{API: env.Client}
	obs := &recordingObserver{}
	l := New(counter, Options{Table: env.Ledger, Observer: obs})
	mustApply(t, l, mutation(t, ledger.EntryGrant, "hot", "g", "1000"))
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { mustApply(t, l, mutation(t, ledger.EntryPurchase, "hot", fmt.Sprint("p", i), "1")) })
	}
	wg.Wait()

	obs.mu.Lock()
	defer obs.mu.Unlock()
	if got, want := int64(len(obs.groups)), counter.n.Load(); got != want {
		t.Errorf("%d groups observed, %d transactions sent", got, want)
	}
	sum := 0
	for _, n := range obs.groups {
		sum += n
	}
	if sum != 51 {
		t.Errorf("observed groups add up to %d mutations, want 51", sum)
	}
	if len(obs.retries) != 0 {
		t.Errorf("retries = %q, want none", obs.retries)
	}
	t.Logf("group sizes: %v", obs.groups)
}
