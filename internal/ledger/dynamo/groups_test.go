package dynamo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// transactionCounter counts the transactions that reach DynamoDB Local.
type transactionCounter struct {
	API
	n atomic.Int64
}

func (c *transactionCounter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.n.Add(1)
	return c.API.TransactWriteItems(ctx, in, opts...)
}

// holdFirst stands before a ledger's DynamoDB: the ledger's first
// transaction waits until release is closed, then goes to first, not to API
// (so that only the transactions after it reach API). While it waits, its
// user's drainer is busy, and the calls a test makes queue behind it in the
// order the test makes them: the next group is what the test composed, however
// slowly a busy machine runs (a linger would only gather what arrived in
// time).
type holdFirst struct {
	API
	first   API
	held    chan struct{} // closed once the first transaction waits
	release chan struct{}
	n       atomic.Int64
}

func newHoldFirst(api, first API) *holdFirst {
	return &holdFirst{API: api, first: first, held: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdFirst) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if h.n.Add(1) > 1 {
		return h.API.TransactWriteItems(ctx, in, opts...)
	}
	close(h.held)
	<-h.release
	return h.first.TransactWriteItems(ctx, in, opts...)
}

// applyBehind applies first (a grant, whose transaction h holds), then each
// of ms in order once the one before is queued behind it, then lets first
// commit, and returns the answers of ms: ms are the next group, in order.
// A call not answered within a minute gets context.DeadlineExceeded.
func applyBehind(t *testing.T, l *Ledger, h *holdFirst, first ledger.Mutation, ms ...ledger.Mutation) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	firstErr := make(chan error, 1)
	go func() { _, err := l.Apply(ctx, first); firstErr <- err }()
	<-h.held
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { _, errs[i] = l.Apply(ctx, m) })
		waitQueued(t, l, first.UserID, i+1)
	}
	close(h.release)
	if err := <-firstErr; err != nil {
		t.Fatalf("%s %s, the transaction the others queued behind: %v", first.Type, first.RequestID, err)
	}
	wg.Wait()
	return errs
}

// waitQueued waits until n calls of user wait for their group. It fails the
// test after a minute; it asserts nothing about speed.
func waitQueued(t *testing.T, l *Ledger, user string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		l.queues.mu.Lock()
		q := l.queues.m[user]
		queued := q != nil && len(q.pending) >= n
		l.queues.mu.Unlock()
		if queued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls of %s not queued after a minute", n, user)
		}
	}
}

// waitDrained waits until user has no queue: its drainer has taken every
// call and is done. It fails the test after a minute.
func waitDrained(t *testing.T, l *Ledger, user string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		l.queues.mu.Lock()
		_, busy := l.queues.m[user]
		l.queues.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drainer of %s still busy after a minute", user)
		}
	}
}

// Purchases queued together commit together, and each gets its own answer:
// the one the balance cannot cover at its place in line is refused alone.
func TestAGroupRefusesAnOverdraftAlone(t *testing.T) {
	t.Parallel()
	counter := &transactionCounter{}
	env := dynamotest.New(t)
	counter.API = env.Client
	h := newHoldFirst(counter, env.Client) // the grant's transaction is not counted
	l := New(h, Options{Table: env.Ledger, Linger: 300 * time.Millisecond})

	amounts := []string{"30", "30", "10", "10"}
	var ms []ledger.Mutation
	for i, a := range amounts {
		ms = append(ms, mutation(t, ledger.EntryPurchase, "u1", fmt.Sprint("p", i), a))
	}
	errs := applyBehind(t, l, h, mutation(t, ledger.EntryGrant, "u1", "g", "50"), ms...)
	want := []string{"", ledger.ReasonInsufficientBalance, "", ""}
	for i, err := range errs {
		if ledger.ReasonOf(err) != want[i] {
			t.Errorf("purchase %d of %s: %v, want reason %q", i, amounts[i], err, want[i])
		}
	}
	if got := counter.n.Load(); got != 1 {
		t.Errorf("%d transactions, want the four purchases in one (the refusal's record with them)", got)
	}
	acct := assertAuditClean(t, l, "u1")
	if !acct.Balance.IsZero() || acct.Version != 4 {
		t.Errorf("account = balance %s version %d, want 0 and 4", acct.Balance, acct.Version)
	}

	// The refusal was recorded with its group: sent again once the balance
	// would cover it, it is the same refusal.
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g2", "100"))
	_, err := l.Apply(context.Background(), mutation(t, ledger.EntryPurchase, "u1", "p1", amounts[1]))
	if e, ok := ledger.AsError(err); !ok || e.Reason != ledger.ReasonInsufficientBalance || !e.Replayed {
		t.Errorf("the refused purchase again, after a grant: %v, want %s, replayed", err, ledger.ReasonInsufficientBalance)
	}
	if acct := assertAuditClean(t, l, "u1"); acct.Version != 5 {
		t.Errorf("account at version %d, want 5 (the grant only)", acct.Version)
	}
}

func TestGroupCommitOnAHotUser(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		maxBatch  int
		fewerThan int64 // transactions, for 100 purchases
	}{{maxBatch: 0, fewerThan: 60}, {maxBatch: 1, fewerThan: 101}} {
		t.Run(fmt.Sprint("max batch ", tt.maxBatch), func(t *testing.T) {
			t.Parallel()
			counter := &transactionCounter{}
			env := dynamotest.New(t)
			counter.API = env.Client
			l := New(counter, Options{Table: env.Ledger, MaxBatch: tt.maxBatch})
			mustApply(t, l, mutation(t, ledger.EntryGrant, "hot", "g", "1000"))
			counter.n.Store(0)
			var wg sync.WaitGroup
			for i := range 100 {
				wg.Go(func() { mustApply(t, l, mutation(t, ledger.EntryPurchase, "hot", fmt.Sprint("p", i), "1")) })
			}
			wg.Wait()
			got := counter.n.Load()
			if got >= tt.fewerThan || (tt.maxBatch == 1 && got != 100) {
				t.Errorf("100 concurrent purchases took %d transactions with max batch %d", got, tt.maxBatch)
			}
			t.Logf("100 concurrent purchases on one user: %d transactions", got)
			if acct := assertAuditClean(t, l, "hot"); acct.Version != 101 || acct.Balance.String() != "900" {
				t.Errorf("account = version %d balance %s, want 101 and 900", acct.Version, acct.Balance)
			}
		})
	}
}

// A refund queued right behind its purchase waits for the purchase's group
// to commit instead of being refused for a purchase not found.
// purchaseThenRefund grants u1 50 and, while the grant commits, queues
// purchase p1 of 20 and right behind it a refund of 5 of it: the two are
// the next group.
func purchaseThenRefund(t *testing.T, l *Ledger, h *holdFirst) (purchaseErr, refundErr error) {
	t.Helper()
	refund, err := ledger.NewMutation(ledger.EntryRefund, ledger.Request{UserID: "u1", RequestID: "r1", Amount: "5", PurchaseRequestID: "p1"}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	errs := applyBehind(t, l, h, mutation(t, ledger.EntryGrant, "u1", "g", "50"), mutation(t, ledger.EntryPurchase, "u1", "p1", "20"), refund)
	return errs[0], errs[1]
}

func TestARefundInTheGroupOfItsPurchase(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	h := newHoldFirst(env.Client, env.Client)
	l := New(h, Options{Table: env.Ledger, Linger: 300 * time.Millisecond})
	purchaseErr, refundErr := purchaseThenRefund(t, l, h)
	if purchaseErr != nil || refundErr != nil {
		t.Fatalf("purchase: %v; refund right behind it: %v", purchaseErr, refundErr)
	}
	if acct := assertAuditClean(t, l, "u1"); acct.Balance.String() != "35" {
		t.Errorf("balance = %s, want 50-20+5 = 35", acct.Balance)
	}
}

// When a group runs out of attempts, only its own calls are given up on; a
// call that waited for the next group (a refund behind its purchase) is
// tried there, and answered for itself.
func TestGivingUpOnAGroupLeavesTheNextOneItsTurn(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	inj := &conflictInjector{API: env.Client, conflicts: fastRetry.MaxAttempts} // every attempt of the purchase's group
	h := newHoldFirst(inj, env.Client)                                          // the grant's goes past inj
	l := New(h, Options{Table: env.Ledger, Retry: fastRetry, Linger: 300 * time.Millisecond})
	purchaseErr, refundErr := purchaseThenRefund(t, l, h)
	if ledger.ReasonOf(purchaseErr) != ledger.ReasonTooManyConflicts {
		t.Errorf("purchase through %d conflicts: %v, want %s", fastRetry.MaxAttempts, purchaseErr, ledger.ReasonTooManyConflicts)
	}
	// The purchase never committed, so its refund, tried on its own, finds none.
	if ledger.ReasonOf(refundErr) != ledger.ReasonPurchaseNotFound {
		t.Errorf("refund behind it: %v, want %s", refundErr, ledger.ReasonPurchaseNotFound)
	}
	if acct := assertAuditClean(t, l, "u1"); acct.Balance.String() != "50" || acct.Version != 1 {
		t.Errorf("account = %s at version %d, want 50 at version 1", acct.Balance, acct.Version)
	}
}

// A balance changed behind the ledger's back without a new version (the
// drift reconciliation reports) is not overwritten from the cached aggregate.
func TestACachedAggregateDoesNotOverwriteADriftedBalance(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "10")) // caches balance 10 at version 1
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &env.Ledger, Key: accountKey("u1"),
		UpdateExpression:          aws.String("SET balance = :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": ddbattr.Decimal(decimal.NewFromInt(15))},
	})
	if err != nil {
		t.Fatal(err)
	}
	res := mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g2", "5"))
	if res.Balance.String() != "20" {
		t.Errorf("grant after the drift: balance %s, want 20 (the drifted 15 + 5, not the cached 10 + 5)", res.Balance)
	}
}

// Process a caches the account; process b then commits a purchase; a is
// asked to refund it. Planned on a's cache, the refund's entry would take the
// purchase's own key (both E#2), and DynamoDB refuses two actions on one item
// outright, failing the whole group. a goes through the proxy, which refuses
// such a transaction as DynamoDB does: the emulator, when a condition fails
// too, just cancels it and a retry would hide the bug.
func TestARefundOfAnotherProcesssPurchase(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a := New(dynamolocal.NewClient(p.URL), Options{Table: env.Ledger})
	b := New(env.Client, Options{Table: env.Ledger})
	mustApply(t, a, mutation(t, ledger.EntryGrant, "u1", "g", "100")) // a caches version 1
	mustApply(t, b, mutation(t, ledger.EntryPurchase, "u1", "p1", "20"))
	r, err := ledger.NewMutation(ledger.EntryRefund, ledger.Request{UserID: "u1", RequestID: "r1", Amount: "5", PurchaseRequestID: "p1"}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	res := mustApply(t, a, r)
	if res.Entry.Version != 3 || res.Balance.String() != "85" {
		t.Errorf("refund through a: version %d, balance %s; want 3 and 85", res.Entry.Version, res.Balance)
	}
	assertAuditClean(t, a, "u1")
}

// bumpBeforeAccountReads is another writer that moves the balance (a drift,
// without a new version) just before each account read of the ledger, so
// that every read finds the account changed since the last.
type bumpBeforeAccountReads struct {
	API
	table string
	on    atomic.Bool
}

func (w *bumpBeforeAccountReads) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if sk, ok := in.Key["SK"].(*types.AttributeValueMemberS); ok && sk.Value == accountSK && w.on.Load() {
		_, err := w.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &w.table, Key: in.Key,
			UpdateExpression:          aws.String("SET balance = balance + :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": ddbattr.Decimal(decimal.NewFromInt(1))}})
		if err != nil {
			return nil, err
		}
	}
	return w.API.GetItem(ctx, in, opts...)
}

// A refusal decided on a stale cache is not recorded: its record commits
// only under the account's condition, which fails; decided again on a read,
// the refusal stands and is recorded, even while another writer keeps
// moving the account: the caller gets INSUFFICIENT_BALANCE, not an internal
// error after the retries run out.
func TestARefusalStandsWhileAnotherWriterMovesTheAccount(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	w := &bumpBeforeAccountReads{API: env.Client, table: env.Ledger}
	l := New(w, Options{Table: env.Ledger, Retry: fastRetry})
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "10")) // caches balance 10
	setBalance(t, env, "u1", 11)                                     // the cache is stale
	w.on.Store(true)
	m := mutation(t, ledger.EntryPurchase, "u1", "p", "1000")
	_, err := l.Apply(context.Background(), m)
	e, ok := ledger.AsError(err)
	if !ok || e.Reason != ledger.ReasonInsufficientBalance || e.Replayed {
		t.Fatalf("a purchase of 1000 on a balance of about 10: %v, want %s", err, ledger.ReasonInsufficientBalance)
	}
	if strings.Contains(e.Message, "balance 10 ") {
		t.Errorf("the refusal was decided on the stale cache: %q", e.Message)
	}
	rec, ok, err := l.request(context.Background(), "u1", "p")
	if err != nil || !ok || rec.Refusal == nil || !reflect.DeepEqual(*rec.Refusal, *e) {
		t.Errorf("record of the refusal: %+v, %v, %v; want %+v", rec, ok, err, e)
	}
}

// failOnce fails the first transaction with an error that is not a
// cancellation (a timeout, a reset): its outcome is unknown.
type failOnce struct {
	API
	failed atomic.Bool
}

func (f *failOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.failed.CompareAndSwap(false, true) {
		return nil, errors.New("connection reset by peer")
	}
	return f.API.TransactWriteItems(ctx, in, opts...)
}

// Every call of a group whose write failed gets an answer, repeats of one
// request among them; a retry afterwards applies the request once.
func TestEveryCallOfAFailedGroupIsAnswered(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	h := newHoldFirst(&failOnce{API: env.Client}, env.Client) // the first grant's goes past failOnce
	l := New(h, Options{Table: env.Ledger, Linger: 200 * time.Millisecond})
	m := mutation(t, ledger.EntryGrant, "u1", "g", "5")
	errs := applyBehind(t, l, h, mutation(t, ledger.EntryGrant, "u1", "g0", "1"), m, m, m)
	for i, err := range errs {
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call %d of the failed group: %v, want the write's error", i, err)
		}
	}
	res := mustApply(t, l, m)
	if res.Replayed {
		t.Error("the retry says replayed, but the failed write wrote nothing")
	}
	if acct := assertAuditClean(t, l, "u1"); acct.Version != 2 {
		t.Errorf("version %d, want 2 (the grant they queued behind, and the retry)", acct.Version)
	}
}
