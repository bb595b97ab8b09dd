package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// failWhilePrepared fails chosen transactions of a ledger once the group
// after each is planned: it holds the transaction until the calls in line
// right behind its own have left the queue (while a transaction is in
// flight, only planning ahead takes calls from it: ahead.go), then fails
// it with its fault. The calls are purchases p0, p1, ... queued in that
// order. The faults are what DynamoDB Local never produces on its own: a
// TransactionConflict, a connection reset before the request arrived,
// and an answer lost after the transaction committed.
type failWhilePrepared struct {
	API
	l      *Ledger
	user   string
	calls  int              // p0 to p<calls-1>
	faults map[int64]string // transaction number (from 1) -> conflict, reset or lost
	n      atomic.Int64
	failed atomic.Int64 // faults injected with a group planned behind
	stuck  atomic.Int64 // faulted transactions behind which no group was planned
}

func (f *failWhilePrepared) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	fault, ok := f.faults[f.n.Add(1)]
	if !ok {
		return f.API.TransactWriteItems(ctx, in, opts...)
	}
	if f.waitPlannedBehind(in) {
		f.failed.Add(1)
	} else {
		f.stuck.Add(1)
	}
	switch fault {
	case "conflict":
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[0].Code = aws.String("TransactionConflict")
		return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
	case "lost":
		if _, err := f.API.TransactWriteItems(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("connection reset by peer")
}

// waitPlannedBehind waits until the call in line after the last of in's
// requests has left the queue, and reports whether it did within a minute.
func (f *failWhilePrepared) waitPlannedBehind(in *dynamodb.TransactWriteItemsInput) bool {
	last := -1
	for _, it := range in.TransactItems {
		if it.Put == nil {
			continue
		}
		if sk, ok := it.Put.Item["SK"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(sk.Value, requestPrefix+"p") {
			i, err := strconv.Atoi(strings.TrimPrefix(sk.Value, requestPrefix+"p"))
			if err == nil && i > last {
				last = i
			}
		}
	}
	if last < 0 || last+1 >= f.calls {
		return false // no call behind it
	}
	taken := func() bool {
		f.l.queues.mu.Lock()
		defer f.l.queues.mu.Unlock()
		q := f.l.queues.m[f.user]
		if q == nil || len(q.pending) == 0 {
			return true
		}
		head, err := strconv.Atoi(strings.TrimPrefix(q.pending[0].m.RequestID, "p"))
		return err == nil && head > last+1
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if taken() {
			return true
		}
	}
	return false
}

// A group planned while the one before it is in flight is decided on the
// account that one leaves. When that one fails (cancelled for a conflict,
// or an unknown outcome, committed or not), the group planned behind it is
// dropped, never sent, and its calls are decided again on the account as
// it is: 64 purchases of 1 from 64 goroutines on a balance of 50 end with
// exactly 50 entries, versions 2 to 51 each once with the balance it
// leaves, 14 refusals, and a balance of 0, whatever failed on the way.
func TestAGroupPlannedAheadOfAFailedOneIsDecidedAgain(t *testing.T) {
	t.Parallel()
	const user, purchases, granted = "u1", 64, 50
	env := dynamotest.New(t)
	f := &failWhilePrepared{API: env.Client, user: user, calls: purchases,
		// Counted after the grant: groups of 4, so every few groups one
		// fails, with the groups behind it planned.
		faults: map[int64]string{2: "conflict", 5: "reset", 8: "lost", 11: "conflict", 13: "lost"}}
	h := newHoldFirst(f, env.Client) // the grant's transaction is not counted
	l := New(h, Options{Table: env.Ledger, MaxBatch: 4, Retry: fastRetry})
	f.l = l

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ms := make([]ledger.Mutation, purchases)
	for i := range ms {
		ms[i] = mutation(t, ledger.EntryPurchase, user, fmt.Sprint("p", i), "1")
	}
	results := make([]ledger.Result, purchases)
	errs := make([]error, purchases)
	grantErr := make(chan error, 1)
	grant := mutation(t, ledger.EntryGrant, user, "g", fmt.Sprint(granted))
	go func() {
		_, err := l.Apply(ctx, grant)
		grantErr <- err
	}()
	<-h.held
	var wg sync.WaitGroup
	for i := range ms { // queued in their order, behind the grant
		wg.Go(func() { results[i], errs[i] = l.Apply(ctx, ms[i]) })
		waitQueued(t, l, user, i+1)
	}
	close(h.release)
	if err := <-grantErr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if f.failed.Load() == 0 || f.stuck.Load() > 0 {
		t.Fatalf("%d faults with a group planned behind them, %d without: the test tested nothing it means to", f.failed.Load(), f.stuck.Load())
	}

	// A call whose outcome was unknown is sent again, with its request
	// id, as a client would: it is applied once, or answered as it was.
	for i, err := range errs {
		if err != nil && ledger.ReasonOf(err) == "" {
			results[i], errs[i] = l.Apply(ctx, ms[i])
		}
	}
	versions := map[int64]string{}
	refused := 0
	for i, err := range errs {
		switch {
		case ledger.ReasonOf(err) == ledger.ReasonInsufficientBalance:
			refused++
		case err != nil:
			t.Errorf("purchase %d: %v", i, err)
		default:
			v := results[i].Entry.Version
			if other, dup := versions[v]; dup {
				t.Errorf("purchases %s and %s both answered with entry version %d", other, ms[i].RequestID, v)
			}
			versions[v] = ms[i].RequestID
			if !results[i].Replayed && results[i].Balance.IntPart() != granted-(v-1) {
				t.Errorf("purchase %d at version %d left balance %s, want %d", i, v, results[i].Balance, granted-(v-1))
			}
		}
	}
	for v := int64(2); v <= granted+1; v++ {
		if _, ok := versions[v]; !ok {
			t.Errorf("no purchase answered with entry version %d", v)
		}
	}
	if len(versions) != granted || refused != purchases-granted {
		t.Errorf("%d purchases applied and %d refused, want %d and %d", len(versions), refused, granted, purchases-granted)
	}
	if acct := assertAuditClean(t, l, user); !acct.Balance.IsZero() || acct.Version != granted+1 {
		t.Errorf("account = balance %s version %d, want 0 and %d", acct.Balance, acct.Version, granted+1)
	}
	t.Logf("%d transactions after the grant, %d of them failed with a group planned behind", f.n.Load(), f.failed.Load())
}

// A refund queued right behind its purchase is not decided while the
// purchase's transaction is in flight (its purchase is not committed yet,
// and would be read as missing): planning ahead stops before it, and goes
// on from it once the purchase has committed, with the purchases behind
// it in the same group.
func TestARefundBehindItsPurchaseInFlightWaitsForIt(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	counter := &transactionCounter{API: env.Client}
	h := newHoldFirst(counter, env.Client) // the grant's transaction is not counted
	l := New(h, Options{Table: env.Ledger})
	refund, err := ledger.NewMutation(ledger.EntryRefund, ledger.Request{UserID: "u1", RequestID: "r1", Amount: "5", PurchaseRequestID: "p1"}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	errs := applyBehind(t, l, h, mutation(t, ledger.EntryGrant, "u1", "g", "50"),
		mutation(t, ledger.EntryPurchase, "u1", "p1", "20"), refund,
		mutation(t, ledger.EntryPurchase, "u1", "p2", "1"), mutation(t, ledger.EntryPurchase, "u1", "p3", "1"))
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if got := counter.n.Load(); got != 2 {
		t.Errorf("%d transactions after the grant, want 2: the purchase, then the refund and the purchases behind it", got)
	}
	if acct := assertAuditClean(t, l, "u1"); acct.Balance.String() != "33" || acct.Version != 5 {
		t.Errorf("account = balance %s version %d, want 50-20+5-1-1 = 33 and 5", acct.Balance, acct.Version)
	}
}
