package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// conflictOnce cancels the first transaction after armed with
// TransactionConflict, once released, and passes every other one on: the
// caller that leads that transaction's group waits in it until the test
// releases it, and then must back off.
type conflictOnce struct {
	API
	armed   atomic.Bool
	held    chan struct{} // closed once the armed transaction waits
	release chan struct{}
}

func (c *conflictOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if !c.armed.CompareAndSwap(true, false) {
		return c.API.TransactWriteItems(ctx, in, opts...)
	}
	close(c.held)
	<-c.release
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	for i := range reasons {
		reasons[i].Code = aws.String("None")
	}
	reasons[0].Code = aws.String("TransactionConflict")
	return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
}

// The caller that finds its user idle commits its group in its own
// goroutine. If its try is cancelled and it leaves while the group backs
// off, it gets its context's error, its own call is not applied (its
// request may be sent again), and the calls that queued behind it are
// answered each exactly once, in their groups.
func TestALeaderThatLeavesDuringABackoffLeavesTheQueueCommitting(t *testing.T) {
	t.Parallel()
	inj := &conflictOnce{held: make(chan struct{}), release: make(chan struct{})}
	l, _ := newLedger(t, func(c *dynamodb.Client) API { inj.API = c; return inj }, fastRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "100"))
	inj.armed.Store(true)

	ctx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := l.Apply(ctx, mutation(t, ledger.EntryPurchase, "u1", "lead", "10"))
		leaderErr <- err
	}()
	<-inj.held // the leader is in its group's transaction
	const followers = 5
	errs := make([]error, followers)
	waitCtx, stop := context.WithTimeout(context.Background(), time.Minute) // a lost call fails, not hangs
	defer stop()
	var wg sync.WaitGroup
	for i := range followers {
		wg.Go(func() {
			_, errs[i] = l.Apply(waitCtx, mutation(t, ledger.EntryPurchase, "u1", fmt.Sprint("f", i), "10"))
		})
		waitQueued(t, l, "u1", i+1)
	}
	cancel()
	close(inj.release)
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the leader that left: %v, want context.Canceled", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("purchase f%d queued behind the leader: %v", i, err)
		}
	}
	waitDrained(t, l, "u1")
	if acct := assertAuditClean(t, l, "u1"); acct.Version != 1+followers || acct.Balance.String() != "50" {
		t.Errorf("account = version %d balance %s, want %d and 50 (the leader's purchase not applied)", acct.Version, acct.Balance, 1+followers)
	}
	// The leader's request was never applied: sent again, it is, once.
	res := mustApply(t, l, mutation(t, ledger.EntryPurchase, "u1", "lead", "10"))
	if res.Replayed || res.Entry.Version != 2+followers {
		t.Errorf("the leader's purchase sent again = version %d replayed %v, want version %d, new", res.Entry.Version, res.Replayed, 2+followers)
	}
}

// Many callers of one balance, a third of them leaving at random moments
// (before their turn, while they lead their group's commit, while they wait
// behind one): every call that was answered was answered once, every
// request sent again gets the answer it had or is applied now, and the
// ledger stays exact: as many entries as purchases applied, the balance
// never below zero, the audit clean.
func TestCallersLeavingAtRandomKeepOneBalanceExact(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	l := New(env.Client, Options{Table: env.Ledger, Retry: fastRetry})
	const grant, buyers = 60, 120
	mustApply(t, l, mutation(t, ledger.EntryGrant, "hot", "g", fmt.Sprint(grant)))

	var applied, refused, left atomic.Int64
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%3 == 0 {
				time.AfterFunc(time.Duration(rand.N(3000))*time.Microsecond, cancel)
			}
			_, err := l.Apply(ctx, mutation(t, ledger.EntryPurchase, "hot", fmt.Sprint("p", i), "1"))
			switch {
			case err == nil:
				applied.Add(1)
			case ledger.ReasonOf(err) == ledger.ReasonInsufficientBalance:
				refused.Add(1)
			case errors.Is(err, context.Canceled) && i%3 == 0:
				left.Add(1)
			default:
				t.Errorf("purchase p%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if applied.Load()+refused.Load()+left.Load() != buyers {
		t.Fatalf("%d applied, %d refused, %d left: not %d answers", applied.Load(), refused.Load(), left.Load(), buyers)
	}
	acct := assertAuditClean(t, l, "hot")
	if acct.Balance.IsNegative() || acct.Version < 1+applied.Load() || acct.Version > 1+applied.Load()+left.Load() {
		t.Errorf("account = version %d balance %s after %d applied and %d left", acct.Version, acct.Balance, applied.Load(), left.Load())
	}
	// Every request again: the same answer, replayed; the ones whose callers
	// left are applied now or were then, never twice.
	var entries int64
	for i := range buyers {
		res, err := l.Apply(context.Background(), mutation(t, ledger.EntryPurchase, "hot", fmt.Sprint("p", i), "1"))
		switch {
		case err == nil:
			entries++
		case ledger.ReasonOf(err) != ledger.ReasonInsufficientBalance:
			t.Errorf("purchase p%d again: %v", i, err)
		}
		if i%3 != 0 && !res.Replayed && err == nil {
			t.Errorf("purchase p%d again was applied anew: its first answer was lost", i)
		}
	}
	after := assertAuditClean(t, l, "hot")
	if after.Version != 1+entries || after.Balance.IntPart() != grant-entries {
		t.Errorf("account = version %d balance %s, want %d entries and balance %d", after.Version, after.Balance, 1+entries, grant-entries)
	}
	if entries > grant {
		t.Errorf("%d purchases of 1 applied from a grant of %d", entries, grant)
	}
}
