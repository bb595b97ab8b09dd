package ddbproxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

func TestMain(m *testing.M) { dynamotest.MainWithoutStreams(m) }

func start(t *testing.T, env *dynamotest.Env, latency time.Duration) *ddbproxy.Proxy {
	t.Helper()
	p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// holdTransactions stands between the proxy and DynamoDB Local: each
// TransactWriteItems waits there until release is closed, so that a test
// decides how long one is in flight, not the machine's speed.
type holdTransactions struct {
	target  http.Handler
	release chan struct{}
	waiting atomic.Int64
}

func newHoldTransactions(t *testing.T, endpoint string) (*holdTransactions, string) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	h := &holdTransactions{target: httputil.NewSingleHostReverseProxy(u), release: make(chan struct{})}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *holdTransactions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		h.waiting.Add(1)
		<-h.release
	}
	h.target.ServeHTTP(w, r)
}

func TestConcurrentTransactionsOnOneItemConflict(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	hold, target := newHoldTransactions(t, env.Endpoint)
	p, err := ddbproxy.Start(ddbproxy.Options{Target: target, Latency: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	db := dynamolocal.NewClient(p.URL)
	put := func(sk string) error {
		_, err := db.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: &env.Ledger, Item: map[string]types.AttributeValue{
				"PK": &types.AttributeValueMemberS{Value: "ACCT#x"}, "SK": &types.AttributeValueMemberS{Value: sk}}}},
			{Put: &types.Put{TableName: &env.Ledger, Item: map[string]types.AttributeValue{
				"PK": &types.AttributeValueMemberS{Value: "ACCT#x"}, "SK": &types.AttributeValueMemberS{Value: "A"}}}},
		}})
		return err
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = put(fmt.Sprint("E#", i)) })
	}
	// One is in flight (held) until the proxy has decided on the other:
	// a conflict, or, were the proxy to miss it, both held.
	for deadline := time.Now().Add(time.Minute); p.Stats().Conflicts == 0 && hold.waiting.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, %d transactions reached DynamoDB and the proxy answered %+v", hold.waiting.Load(), p.Stats())
		}
	}
	close(hold.release)
	wg.Wait()
	var conflicts int
	for _, err := range errs {
		var canceled *types.TransactionCanceledException
		if errors.As(err, &canceled) {
			if got := aws.ToString(canceled.CancellationReasons[1].Code); got != "TransactionConflict" {
				t.Errorf("cancellation reason of the shared item = %q, want TransactionConflict", got)
			}
			conflicts++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if conflicts != 1 || p.Stats().Conflicts != 1 {
		t.Fatalf("two transactions on one item at once: %d conflicts (proxy counted %d), want 1", conflicts, p.Stats().Conflicts)
	}
	if err := put("E#2"); err != nil {
		t.Errorf("a transaction after the others ended: %v", err)
	}
	// Of the three transactions, two reached the emulator (the conflicting
	// one did not), and each took it some time to answer.
	if ops := p.Stats().Ops["TransactWriteItems"]; ops.Calls != 2 || ops.Time <= 0 {
		t.Errorf("TransactWriteItems answered by DynamoDB: %+v, want 2 calls that took time", ops)
	}
}

// DynamoDB refuses a transaction with two actions on one item with a
// ValidationException. When a condition of such a transaction fails, the
// emulator answers with a cancellation instead (a retry may then carry it
// out); the proxy refuses it the way DynamoDB does.
func TestTwoActionsOnOneItemAreRefused(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	ctx := context.Background()
	key := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "ACCT#x"}, "SK": &types.AttributeValueMemberS{Value: "E#1"}}
	}
	if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: key()}); err != nil {
		t.Fatal(err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &env.Ledger, Item: key(), ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		{Update: &types.Update{TableName: &env.Ledger, Key: key(), UpdateExpression: aws.String("SET n = :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}}},
	}}
	var apiErr smithy.APIError
	if _, err := env.Client.TransactWriteItems(ctx, in); !errors.As(err, &apiErr) || apiErr.ErrorCode() == "ValidationException" {
		t.Logf("the emulator itself answered %v: this test no longer shows what the proxy adds", err)
	}
	p := start(t, env, 0)
	_, err := dynamolocal.NewClient(p.URL).TransactWriteItems(ctx, in)
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ValidationException" {
		t.Fatalf("two actions on one item through the proxy: %v, want a ValidationException", err)
	}
	if n := p.Stats().TwoActionRefusals; n != 1 {
		t.Errorf("the proxy counted %d refusals of two actions on one item, want 1", n)
	}
	out, err := env.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.Ledger, Key: key(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.Item["n"]; ok {
		t.Errorf("the refused transaction wrote: %v", out.Item)
	}
}

// Two ledgers ("processes") without group commit race on one user through
// the proxy: they meet real conflicts, retry, and the books stay right.
func TestTheLedgerKeepsItsInvariantsThroughConflicts(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p := start(t, env, 5*time.Millisecond)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	retry := dynamo.Retry{Backoff: dynamo.Backoff{MaxAttempts: 50, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
	ledgers := []*dynamo.Ledger{
		dynamo.New(dynamolocal.NewClient(p.URL), dynamo.Options{Table: env.Ledger, Logger: quiet, MaxBatch: 1, Retry: retry}),
		dynamo.New(dynamolocal.NewClient(p.URL), dynamo.Options{Table: env.Ledger, Logger: quiet, MaxBatch: 1, Retry: retry}),
	}
	apply := func(l *dynamo.Ledger, typ ledger.EntryType, id, amount string) error {
		m, err := ledger.NewMutation(typ, ledger.Request{UserID: "hot", RequestID: id, Amount: amount}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Apply(context.Background(), m)
		return err
	}
	if err := apply(ledgers[0], ledger.EntryGrant, "g", "300"); err != nil {
		t.Fatal(err)
	}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			switch err := apply(ledgers[i%2], ledger.EntryPurchase, fmt.Sprint("p", i), "10"); ledger.ReasonOf(err) {
			case "":
				ok.Add(1)
			case ledger.ReasonInsufficientBalance:
			default:
				t.Errorf("purchase %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if p.Stats().Conflicts == 0 {
		t.Error("no transaction conflicted: the test proves nothing")
	}
	a, err := ledgers[0].Audit(context.Background(), "hot")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range a.Findings {
		t.Errorf("audit: %s", f)
	}
	if ok.Load() != 30 || !a.Account.Balance.IsZero() || a.Account.Version != 31 {
		t.Errorf("%d purchases of 10 from 300 succeeded, balance %s, version %d; want 30, 0, 31", ok.Load(), a.Account.Balance, a.Account.Version)
	}
	t.Logf("proxy: %+v", p.Stats())
}
