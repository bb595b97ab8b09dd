package dynamo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
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
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

func TestMain(m *testing.M) { dynamotest.MainWithoutStreams(m) }

// fastRetry keeps tests that exhaust the retries short.
var fastRetry = Retry{Backoff: Backoff{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}, Throttled: Backoff{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}}

func newLedger(tb testing.TB, db func(*dynamodb.Client) API, retry Retry) (*Ledger, *dynamotest.Env) {
	tb.Helper()
	env := dynamotest.New(tb)
	var api API = env.Client
	if db != nil {
		api = db(env.Client)
	}
	return New(api, Options{Table: env.Ledger, Retry: retry}), env
}

func mutation(tb testing.TB, t ledger.EntryType, user, requestID, amount string) ledger.Mutation {
	tb.Helper()
	m, err := ledger.NewMutation(t, ledger.Request{UserID: user, RequestID: requestID, Amount: amount}, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func mustApply(tb testing.TB, l *Ledger, m ledger.Mutation) ledger.Result {
	tb.Helper()
	res, err := l.Apply(context.Background(), m)
	if err != nil {
		tb.Fatalf("%s %s: %v", m.Type, m.RequestID, err)
	}
	return res
}

func assertAuditClean(tb testing.TB, l *Ledger, user string) ledger.Account {
	tb.Helper()
	a, err := l.Audit(context.Background(), user)
	if err != nil {
		tb.Fatalf("audit %s: %v", user, err)
	}
	for _, f := range a.Findings {
		tb.Errorf("audit finding: %s", f)
	}
	return a.Account
}

// conflictInjector stands between the ledger and DynamoDB Local to produce
// what the emulator never does: a TransactWriteItems cancelled with
// TransactionConflict, as the real service answers when another transaction
// holds one of the items.
type conflictInjector struct {
	API
	conflicts    int    // how many calls to cancel; -1 cancels every call
	code         string // the reason given; "" = TransactionConflict
	afterCommit  bool   // the first call commits, then reports the cancellation (a lost answer)
	transactions atomic.Int64
}

func (c *conflictInjector) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	n := c.transactions.Add(1)
	if c.conflicts >= 0 && n > int64(c.conflicts) {
		return c.API.TransactWriteItems(ctx, in, opts...)
	}
	if c.afterCommit && n == 1 {
		if _, err := c.API.TransactWriteItems(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	code := c.code
	if code == "" {
		code = "TransactionConflict"
	}
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	for i := range reasons {
		reasons[i].Code = aws.String("None")
	}
	reasons[0].Code = aws.String(code) // the account update
	return nil, &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [None, None, " + code + "]"),
		CancellationReasons: reasons,
	}
}

// partialReasons passes transactions to DynamoDB Local but weakens what a
// cancellation says, as a store might that reports only some failed
// conditions: it hides a failed request record when another item failed too,
// or drops the old item of a failed request record.
type partialReasons struct {
	API
	dropItem bool // keep the request's ConditionalCheckFailed, drop its old item
}

func (p *partialReasons) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := p.API.TransactWriteItems(ctx, in, opts...)
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		return out, err
	}
	reasons := canceled.CancellationReasons
	isRequest := func(i int) bool {
		put := in.TransactItems[i].Put
		if put == nil {
			return false
		}
		sk, _ := put.Item["SK"].(*types.AttributeValueMemberS)
		return sk != nil && strings.HasPrefix(sk.Value, requestPrefix)
	}
	failed := func(i int) bool { return aws.ToString(reasons[i].Code) == "ConditionalCheckFailed" }
	otherFailed := false
	for i := range reasons {
		otherFailed = otherFailed || (failed(i) && !isRequest(i))
	}
	for i := range reasons {
		switch {
		case !isRequest(i) || !failed(i):
		case p.dropItem:
			reasons[i].Item = nil
		case otherFailed:
			reasons[i] = types.CancellationReason{Code: aws.String("None")}
		}
	}
	return out, err
}

// A retry of a request that succeeded gets its original result even when the
// ledger has moved on so that the request would now be refused, and even when
// the cancellation does not say the request record was taken.
func TestReplayWinsOverRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		dropItem bool
		setup    func(t *testing.T, l *Ledger, env *dynamotest.Env) ledger.Mutation // returns the request to retry
	}{
		{"purchase after the balance is spent", false, func(t *testing.T, l *Ledger, env *dynamotest.Env) ledger.Mutation {
			p := mutation(t, ledger.EntryPurchase, "u1", "p1", "10")
			mustApply(t, l, p)
			mustApply(t, l, mutation(t, ledger.EntryPurchase, "u1", "p2", "10"))
			return p
		}},
		{"purchase after the account is frozen", false, func(t *testing.T, l *Ledger, env *dynamotest.Env) ledger.Mutation {
			p := mutation(t, ledger.EntryPurchase, "u1", "p1", "10")
			mustApply(t, l, p)
			freeze(t, env, "u1")
			return p
		}},
		{"refund after the purchase is refunded in full", false, func(t *testing.T, l *Ledger, env *dynamotest.Env) ledger.Mutation {
			mustApply(t, l, mutation(t, ledger.EntryPurchase, "u1", "p1", "10"))
			r, err := ledger.NewMutation(ledger.EntryRefund, ledger.Request{UserID: "u1", RequestID: "r1", Amount: "10", PurchaseRequestID: "p1"}, ledger.DefaultScale)
			if err != nil {
				t.Fatal(err)
			}
			mustApply(t, l, r)
			return r
		}},
		{"grant whose old request record is not returned", true, func(t *testing.T, l *Ledger, env *dynamotest.Env) ledger.Mutation {
			g := mutation(t, ledger.EntryGrant, "u1", "g2", "5")
			mustApply(t, l, g)
			return g
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, env := newLedger(t, func(c *dynamodb.Client) API { return &partialReasons{API: c, dropItem: tt.dropItem} }, DefaultRetry)
			mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "20"))
			m := tt.setup(t, l, env)
			before := assertAuditClean(t, l, "u1")
			res, err := l.Apply(context.Background(), m)
			if err != nil {
				t.Fatalf("retry of %s: %v, want its original result", m.RequestID, err)
			}
			if !res.Replayed || res.Entry.RequestID != m.RequestID {
				t.Errorf("retry of %s = %+v, want the original entry, replayed", m.RequestID, res)
			}
			if after := assertAuditClean(t, l, "u1"); after.Version != before.Version {
				t.Errorf("the retry wrote: version %d, then %d", before.Version, after.Version)
			}
		})
	}
}

func TestTransactionConflictIsRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		conflicts    int
		code         string
		afterCommit  bool
		wantErr      string // reason; "" = success
		wantKind     ledger.Kind
		wantReplayed bool
		wantCalls    int64
		wantEntries  int64 // after the grant that funds the purchase
	}{
		{name: "one conflict, then success", conflicts: 1, wantCalls: 2, wantEntries: 2},
		{name: "conflicts until the bound", conflicts: -1, wantErr: ledger.ReasonTooManyConflicts, wantKind: ledger.KindAborted, wantCalls: int64(fastRetry.MaxAttempts), wantEntries: 1},
		{name: "throttled until the bound", conflicts: -1, code: "ThrottlingError", wantErr: ledger.ReasonThrottled, wantKind: ledger.KindUnavailable, wantCalls: int64(fastRetry.MaxAttempts), wantEntries: 1},
		// The first call commits but its caller hears TransactionConflict: the
		// retry finds the request record and answers with the original entry.
		{name: "committed, answer lost", conflicts: 1, afterCommit: true, wantReplayed: true, wantCalls: 2, wantEntries: 2},
		// The same, and every retry is cancelled too: giving up still finds
		// that the request committed.
		{name: "committed, then conflicts until the bound", conflicts: -1, afterCommit: true, wantReplayed: true, wantCalls: int64(fastRetry.MaxAttempts), wantEntries: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inj := &conflictInjector{conflicts: 0}
			l, _ := newLedger(t, func(c *dynamodb.Client) API { inj.API = c; return inj }, fastRetry)
			mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "grant", "100"))
			inj.transactions.Store(0)
			inj.conflicts, inj.code, inj.afterCommit = tt.conflicts, tt.code, tt.afterCommit

			res, err := l.Apply(context.Background(), mutation(t, ledger.EntryPurchase, "u1", "buy", "30"))
			if got := ledger.ReasonOf(err); got != tt.wantErr {
				t.Fatalf("Apply error = %v (reason %q), want reason %q", err, got, tt.wantErr)
			}
			if err == nil && res.Replayed != tt.wantReplayed {
				t.Errorf("Replayed = %v, want %v", res.Replayed, tt.wantReplayed)
			}
			if e, ok := ledger.AsError(err); ok && e.Kind != tt.wantKind {
				t.Errorf("kind = %v, want %v", e.Kind, tt.wantKind)
			}
			if got := inj.transactions.Load(); got != tt.wantCalls {
				t.Errorf("TransactWriteItems calls = %d, want %d", got, tt.wantCalls)
			}
			acct := assertAuditClean(t, l, "u1")
			if acct.Version != tt.wantEntries {
				t.Errorf("entries = %d, want %d (the purchase must apply at most once)", acct.Version, tt.wantEntries)
			}
		})
	}
}

// Two Ledgers on one table are two processes: their per-user queues do not
// see each other, so only the version condition keeps them apart.
func TestVersionRaceAcrossProcesses(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	retry := Retry{Backoff: Backoff{MaxAttempts: 50, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
	a := New(env.Client, Options{Table: env.Ledger, Retry: retry})
	b := New(env.Client, Options{Table: env.Ledger, Retry: retry})
	mustApply(t, a, mutation(t, ledger.EntryGrant, "u1", "grant", "500"))

	const buyers = 40
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			l := a
			if i%2 == 1 {
				l = b
			}
			_, err := l.Apply(context.Background(), mutation(t, ledger.EntryPurchase, "u1", fmt.Sprint("buy-", i), "20"))
			switch ledger.ReasonOf(err) {
			case "":
				ok.Add(1)
			case ledger.ReasonInsufficientBalance:
				refused.Add(1)
			default:
				t.Errorf("purchase %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 25 || refused.Load() != buyers-25 {
		t.Errorf("%d purchases of 20 from 500 succeeded and %d were refused, want 25 and %d", ok.Load(), refused.Load(), buyers-25)
	}
	acct := assertAuditClean(t, a, "u1")
	if !acct.Balance.IsZero() || acct.Version != 26 {
		t.Errorf("account = balance %s version %d, want 0 and 26", acct.Balance, acct.Version)
	}
}

func TestEntriesPages(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	ctx := context.Background()
	for i := range 7 {
		mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", fmt.Sprint("g", i), "1"))
	}
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u2", "g", "1"))
	for _, size := range []int{1, 3, 7, 100} {
		var versions []int64
		token := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("page size %d: more pages than entries", size)
			}
			entries, next, err := l.Entries(ctx, "u1", ledger.EntryQuery{Page: ledger.Page{PageSize: size, PageToken: token}})
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) > size {
				t.Fatalf("page size %d: got %d entries", size, len(entries))
			}
			for _, e := range entries {
				versions = append(versions, e.Version)
			}
			if next == "" {
				break
			}
			token = next
		}
		want := []int64{1, 2, 3, 4, 5, 6, 7}
		if fmt.Sprint(versions) != fmt.Sprint(want) {
			t.Errorf("page size %d: versions %v, want %v", size, versions, want)
		}
	}
	_, next, err := l.Entries(ctx, "u1", ledger.EntryQuery{Page: ledger.Page{PageSize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// Another instance, or this one restarted, takes the token.
	restarted := New(env.Client, Options{Table: env.Ledger})
	if page, _, err := restarted.Entries(ctx, "u1", ledger.EntryQuery{Page: ledger.Page{PageSize: 2, PageToken: next}}); err != nil || len(page) != 2 || page[0].Version != 3 {
		t.Errorf("the next page from another instance: %v, %v; want versions 3 and 4", page, err)
	}

	altered := []byte(next)
	altered[10] ^= 'A' ^ 'B' // another base64url digit
	tests := []struct {
		name  string
		token string
	}{
		{name: "another user's", token: next},
		{name: "garbage", token: "!!!"},
		{name: "altered", token: string(altered)},
		{name: "of the old format, unversioned", token: base64.RawURLEncoding.EncodeToString([]byte(`{"u":"u2","v":0}`))},
		{name: "of another deployment", token: pagetoken.Derived("other-ledger").Encode(0, pagetoken.EntriesRead, "u2")},
		{name: "of ListHistory", token: l.tokens.Encode(1, "ListHistory", "u2", "")},
		{name: "with the key, negative", token: l.tokens.Encode(-5, pagetoken.EntriesRead, "u2")},
		{name: "with the key, after the largest version", token: l.tokens.Encode(math.MaxInt64, pagetoken.EntriesRead, "u2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := l.Entries(ctx, "u2", ledger.EntryQuery{Page: ledger.Page{PageSize: 2, PageToken: tt.token}}); ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
				t.Errorf("err = %v, want %s", err, ledger.ReasonInvalidPageToken)
			}
		})
	}
}

// setBalance sets an account's balance behind the ledger's back, without a
// new version (the drift reconciliation reports).
func setBalance(tb testing.TB, env *dynamotest.Env, user string, balance int64) {
	tb.Helper()
	setAttribute(tb, env, user, accountSK, "balance", ddbattr.Decimal(decimal.NewFromInt(balance)))
}

// freeze sets an account's status behind the ledger's back (there is no
// freeze API yet).
func freeze(tb testing.TB, env *dynamotest.Env, user string) {
	tb.Helper()
	setAttribute(tb, env, user, accountSK, "status", ddbattr.S(string(ledger.StatusFrozen)))
}

// setAttribute sets an attribute of a user's item (sort key sk) behind the
// ledger's back.
func setAttribute(tb testing.TB, env *dynamotest.Env, user, sk, name string, v types.AttributeValue) {
	tb.Helper()
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 &env.Ledger,
		Key:                       key(user, sk),
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": name},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v},
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func TestFrozenAccountRefusesPurchasesOnly(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "10"))
	freeze(t, env, "u1")
	_, err := l.Apply(context.Background(), mutation(t, ledger.EntryPurchase, "u1", "p", "1"))
	if ledger.ReasonOf(err) != ledger.ReasonAccountFrozen {
		t.Fatalf("purchase on a frozen account: %v, want %s", err, ledger.ReasonAccountFrozen)
	}
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g2", "1"))
	acct := assertAuditClean(t, l, "u1")
	if acct.Version != 2 || acct.Status != ledger.StatusFrozen {
		t.Fatalf("account = %+v, want version 2, frozen", acct)
	}
}

func TestApplyHonoursCancellation(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Apply(ctx, mutation(t, ledger.EntryGrant, "u1", "g", "1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled ctx: %v, want context.Canceled", err)
	}
	waitDrained(t, l, "u1") // the drainer has taken the call and is done with it
	out, err := env.Client.Scan(context.Background(), &dynamodb.ScanInput{TableName: &env.Ledger, Select: types.SelectCount})
	if err != nil {
		t.Fatal(err)
	}
	if out.Count != 0 {
		t.Errorf("a call cancelled before its turn wrote %d items", out.Count)
	}
}

// An adjustment that explains the balance must be exactly what the balance
// differs from the sum of the entries: any other amount would leave an
// entry whose balance_after no fold gives, and entries are never edited.
func TestAnExplainingAdjustmentMustBeTheDifference(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	ctx := context.Background()
	explain := func(requestID, amount string, debit bool, expected string) (ledger.Result, error) {
		m, err := ledger.NewMutation(ledger.EntryAdjustment, ledger.Request{UserID: "u1", RequestID: requestID, Amount: amount,
			Debit: debit, Reason: "explain", ExplainBalance: true, ExpectedBalance: expected}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		return l.Apply(ctx, m)
	}
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "100"))

	// Nothing to explain: the balance is the sum of the entries.
	for i := range 2 { // the refusal is recorded: the same request again is its replay
		_, err := explain("adj1", "5", false, "100")
		if e, ok := ledger.AsError(err); !ok || e.Reason != ledger.ReasonNothingToExplain || e.Replayed != (i == 1) {
			t.Errorf("explaining 5 of a sound balance, attempt %d: %v, want %s (replayed the second time)", i+1, err, ledger.ReasonNothingToExplain)
		}
	}

	_, err := env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &env.Ledger, Key: accountKey("u1"),
		UpdateExpression:          aws.String("SET balance = :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": ddbattr.Decimal(decimal.NewFromInt(107))},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		amount string
		debit  bool
	}{
		{"too-little", "5", false},
		{"too-much", "8", false},
		{"the-wrong-way", "7", true},
	} {
		if _, err := explain("adj-"+tc.name, tc.amount, tc.debit, "107"); ledger.ReasonOf(err) != ledger.ReasonNotTheDifference {
			t.Errorf("%s: explaining %s (debit %v) of 107 - 100: %v, want %s", tc.name, tc.amount, tc.debit, err, ledger.ReasonNotTheDifference)
		}
	}
	if a, err := l.Audit(ctx, "u1"); err != nil || a.Account.Version != 1 || len(a.Entries) != 1 {
		t.Fatalf("after the refusals: %+v, %v; want version 1, one entry (nothing written)", a.Account, err)
	}

	res, err := explain("adj2", "7", false, "107")
	if err != nil {
		t.Fatalf("explaining 7 of 107 - 100: %v", err)
	}
	if !res.Entry.Amount.Equal(decimal.NewFromInt(7)) || !res.Balance.Equal(decimal.NewFromInt(107)) {
		t.Errorf("explaining entry: amount %s balance %s, want 7 and 107", res.Entry.Amount, res.Balance)
	}
	if again, err := explain("adj2", "7", false, "107"); err != nil || !again.Replayed {
		t.Errorf("the same explaining adjustment again: %+v, %v; want its replay", again, err)
	}
	if acct := assertAuditClean(t, l, "u1"); !acct.Balance.Equal(decimal.NewFromInt(107)) || acct.Version != 2 {
		t.Errorf("account = %+v, want balance 107 at version 2", acct)
	}
}
