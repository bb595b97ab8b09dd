package dynamo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
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

// The audit is what the other tests trust to say "sound"; it must also say
// "broken" when the ledger is.
func TestAuditFindsABalanceChangedBehindItsBack(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "10"))
	assertAuditClean(t, l, "u1")
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 &env.Ledger,
		Key:                       accountKey("u1"),
		UpdateExpression:          aws.String("SET balance = :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(decimal.NewFromInt(11))},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Audit(context.Background(), "u1")
	if err != nil {
		t.Fatal(err)
	}
	if f := a.Findings; len(f) != 1 || f[0].Kind != ledger.FindingBalanceMismatch || f[0].Expected != "10" || f[0].Found != "11" {
		t.Fatalf("findings = %v, want one %s expecting 10, finding 11", f, ledger.FindingBalanceMismatch)
	}
}

// smallPages reads a partition three items a page, as DynamoDB does past
// 1 MB a page, and runs between once, after the first page.
type smallPages struct {
	API
	between func()
	pages   atomic.Int32
}

func (c *smallPages) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	small := *in
	small.Limit = aws.Int32(3)
	out, err := c.API.Query(ctx, &small, opts...)
	if c.pages.Add(1) == 1 {
		c.between()
	}
	return out, err
}

// A purchase and a refund commit between the pages of an audit: entries
// and request records past the account the audit read are left for the next
// audit, not findings; one past every version the account shows is found.
func TestAnAuditAcrossPagesWhilePurchasesCommit(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	l := New(env.Client, Options{Table: env.Ledger})
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "100"))
	mustApply(t, l, mutation(t, ledger.EntryPurchase, "u1", "p1", "10"))
	c := &smallPages{API: env.Client, between: func() {
		refund, err := ledger.NewMutation(ledger.EntryRefund, ledger.Request{UserID: "u1", RequestID: "r1", Amount: "4", PurchaseRequestID: "p1"}, ledger.DefaultScale)
		if err != nil {
			t.Error(err)
			return
		}
		mustApply(t, l, refund)
		mustApply(t, l, mutation(t, ledger.EntryPurchase, "u1", "p2", "5"))
	}}
	a, err := New(c, Options{Table: env.Ledger}).Audit(context.Background(), "u1")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Findings) != 0 || a.Account.Version != 2 || len(a.Entries) != 2 {
		t.Errorf("audit during a refund and a purchase: findings %v, account at version %d, %d entries; want none, 2 and 2", a.Findings, a.Account.Version, len(a.Entries))
	}
	assertAuditClean(t, l, "u1") // and, read again, the whole ledger is sound

	// An entry no account version accounts for is the ledger's own finding.
	e := ledger.Entry{ID: "01JSTRAY000000000000000000", UserID: "u1", Version: 9, Type: ledger.EntryGrant, Amount: decimal.NewFromInt(1),
		BalanceAfter: decimal.NewFromInt(90), RequestID: "stray", CreateTime: time.Now().UTC()}
	if _, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &env.Ledger, Item: entryItem(e)}); err != nil {
		t.Fatal(err)
	}
	c.pages.Store(1) // no more commits between pages
	if a, err = New(c, Options{Table: env.Ledger}).Audit(context.Background(), "u1"); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(a.Findings, func(f ledger.Finding) bool { return f.Kind == ledger.FindingVersionMismatch }) {
		t.Errorf("audit with an entry at version 9 of 4: %v, want a %s", a.Findings, ledger.FindingVersionMismatch)
	}
}

// setBalance sets an account's balance behind the ledger's back, without a
// new version (the drift reconciliation reports).
func setBalance(tb testing.TB, env *dynamotest.Env, user string, balance int64) {
	tb.Helper()
	setAttribute(tb, env, user, accountSK, "balance", num(decimal.NewFromInt(balance)))
}

// freeze sets an account's status behind the ledger's back (there is no
// freeze API yet).
func freeze(tb testing.TB, env *dynamotest.Env, user string) {
	tb.Helper()
	setAttribute(tb, env, user, accountSK, "status", str(string(ledger.StatusFrozen)))
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
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(decimal.NewFromInt(15))},
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
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(decimal.NewFromInt(1))}})
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
	if err != nil || !ok || rec.Refusal == nil || rec.Refusal.Reason != e.Reason || rec.Refusal.Message != e.Message || rec.Refusal.Kind != e.Kind || rec.Refusal.Metadata["spendable"] != e.Metadata["spendable"] {
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
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(decimal.NewFromInt(107))},
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

// A business refusal is recorded under its request_id: the same request
// again gets the same refusal, marked replayed, and writes nothing, even
// once the ledger would allow it (a client that retried a lost answer must
// not spend points it was told it could not); another request under that
// request_id is ALREADY_EXISTS.
func TestARefusalIsFinal(t *testing.T) {
	t.Parallel()
	for _, tt := range refusalCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assertRefusalIsFinal(t, tt)
		})
	}
}

// refusalCase is a request the ledger refuses for good, and what would let
// it through were it tried anew (TestARefusalIsFinal).
type refusalCase struct {
	name    string
	drift   bool        // the setup changes the balance behind the ledger's back
	setup   ledgerSetup // before the refused request
	typ     ledger.EntryType
	req     ledger.Request
	reason  string
	kind    ledger.Kind
	between ledgerSetup // what would let it through, were it tried anew
}

// ledgerSetup brings a test's ledger (or its table) to a state.
type ledgerSetup func(*testing.T, *Ledger, *dynamotest.Env)

func refusalCases() []refusalCase {
	return []refusalCase{
		{
			name:  "a purchase over the balance",
			setup: grantOf("10"),
			typ:   ledger.EntryPurchase, req: ledger.Request{RequestID: "p", Amount: "30"},
			reason: ledger.ReasonInsufficientBalance, kind: ledger.KindFailedPrecondition,
			between: grantOf("50"),
		},
		{
			name:  "a purchase by a user with no account",
			setup: func(*testing.T, *Ledger, *dynamotest.Env) {},
			typ:   ledger.EntryPurchase, req: ledger.Request{RequestID: "p", Amount: "30"},
			reason: ledger.ReasonInsufficientBalance, kind: ledger.KindFailedPrecondition,
			between: grantOf("50"),
		},
		{
			name: "a purchase on a frozen account",
			setup: func(t *testing.T, l *Ledger, env *dynamotest.Env) {
				grantOf("10")(t, l, env)
				statusOf(ledger.StatusFrozen)(t, l, env)
			},
			typ: ledger.EntryPurchase, req: ledger.Request{RequestID: "p", Amount: "5"},
			reason: ledger.ReasonAccountFrozen, kind: ledger.KindFailedPrecondition,
			between: statusOf(ledger.StatusActive),
		},
		{
			// The refund cap's condition finds it: the write path does not
			// know what the purchase has refunded until that fails.
			name: "a refund over what is left of its purchase",
			setup: func(t *testing.T, l *Ledger, env *dynamotest.Env) {
				grantOf("100")(t, l, env)
				applyRequest(t, l, ledger.EntryPurchase, ledger.Request{UserID: "u1", RequestID: "p1", Amount: "20"})
				applyRequest(t, l, ledger.EntryRefund, ledger.Request{UserID: "u1", RequestID: "r1", Amount: "15", PurchaseRequestID: "p1"})
			},
			typ: ledger.EntryRefund, req: ledger.Request{RequestID: "r2", Amount: "10", PurchaseRequestID: "p1"},
			reason: ledger.ReasonRefundExceedsPurchase, kind: ledger.KindFailedPrecondition,
			between: func(*testing.T, *Ledger, *dynamotest.Env) {}, // refunds only grow: nothing can
		},
		{
			name:  "a refund of a purchase not made yet",
			setup: grantOf("100"),
			typ:   ledger.EntryRefund, req: ledger.Request{RequestID: "r1", Amount: "5", PurchaseRequestID: "p1"},
			reason: ledger.ReasonPurchaseNotFound, kind: ledger.KindNotFound,
			between: func(t *testing.T, l *Ledger, _ *dynamotest.Env) {
				applyRequest(t, l, ledger.EntryPurchase, ledger.Request{UserID: "u1", RequestID: "p1", Amount: "20"})
			},
		},
		{
			// An explaining adjustment whose expected balance is stale: the
			// balance drifts (without a new version) to 110, then to 107,
			// which the same request would explain were it tried anew.
			name:  "an explaining adjustment of a balance that moved",
			drift: true,
			setup: func(t *testing.T, l *Ledger, env *dynamotest.Env) {
				grantOf("100")(t, l, env)
				setBalance(t, env, "u1", 110)
			},
			typ: ledger.EntryAdjustment, req: ledger.Request{RequestID: "adj", Amount: "7", Reason: "explain", ExplainBalance: true, ExpectedBalance: "107"},
			reason: ledger.ReasonBalanceMoved, kind: ledger.KindFailedPrecondition,
			between: func(t *testing.T, _ *Ledger, env *dynamotest.Env) { setBalance(t, env, "u1", 107) },
		},
	}
}

// assertRefusalIsFinal sends tt's request on a fresh ledger, then again
// after tt.between, then another request under its request_id.
func assertRefusalIsFinal(t *testing.T, tt refusalCase) {
	t.Helper()
	ctx := context.Background()
	l, env := newLedger(t, nil, DefaultRetry)
	tt.setup(t, l, env)
	tt.req.UserID = "u1"
	m, err := ledger.NewMutation(tt.typ, tt.req, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Apply(ctx, m)
	first, ok := ledger.AsError(err)
	if !ok || first.Reason != tt.reason || first.Kind != tt.kind || first.Replayed {
		t.Fatalf("%s: %#v, want a refusal %s, not replayed", tt.name, err, tt.reason)
	}

	tt.between(t, l, env)
	before := auditOfRefusal(t, l, tt.drift)
	res, err := l.Apply(ctx, m)
	again, ok := ledger.AsError(err)
	if !ok || !again.Replayed || again.Kind != first.Kind || again.Reason != first.Reason || again.Message != first.Message {
		t.Fatalf("the same request again: %+v, %#v; want %#v, replayed", res, err, first)
	}
	if after := auditOfRefusal(t, l, tt.drift); after.Version != before.Version || !after.Balance.Equal(before.Balance) {
		t.Errorf("the replayed refusal wrote: version %d balance %s, then %d %s", before.Version, before.Balance, after.Version, after.Balance)
	}

	other := tt.req
	other.Amount = "3"
	om, err := ledger.NewMutation(tt.typ, other, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(ctx, om); ledger.ReasonOf(err) != ledger.ReasonRequestIDReused {
		t.Errorf("another request under the refused request_id: %v, want %s", err, ledger.ReasonRequestIDReused)
	}
}

func applyRequest(t *testing.T, l *Ledger, typ ledger.EntryType, req ledger.Request) {
	t.Helper()
	m, err := ledger.NewMutation(typ, req, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, l, m)
}

// grantOf grants u1 amount.
func grantOf(amount string) ledgerSetup {
	return func(t *testing.T, l *Ledger, _ *dynamotest.Env) {
		applyRequest(t, l, ledger.EntryGrant, ledger.Request{UserID: "u1", RequestID: "grant-" + amount, Amount: amount})
	}
}

// statusOf sets u1's account status.
func statusOf(status ledger.Status) ledgerSetup {
	return func(t *testing.T, l *Ledger, _ *dynamotest.Env) {
		if _, _, err := l.SetStatus(context.Background(), "u1", status, "test"); err != nil {
			t.Fatal(err)
		}
	}
}

// auditOfRefusal is assertAuditClean of u1, but for the drift a case
// plants (one balance_mismatch).
func auditOfRefusal(t *testing.T, l *Ledger, drift bool) ledger.Account {
	t.Helper()
	if !drift {
		return assertAuditClean(t, l, "u1")
	}
	a, err := l.Audit(context.Background(), "u1")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Findings) != 1 || a.Findings[0].Kind != ledger.FindingBalanceMismatch {
		t.Errorf("audit findings %v, want the planted %s alone", a.Findings, ledger.FindingBalanceMismatch)
	}
	return a.Account
}

// Many attempts of one refused request at once, through two processes: the
// first to record the refusal is the one answered fresh; every other gets
// the same refusal, replayed, and one record stands.
func TestConcurrentAttemptsOfARefusedRequest(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	retry := Retry{Backoff: Backoff{MaxAttempts: 50, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
	a := New(env.Client, Options{Table: env.Ledger, Retry: retry})
	b := New(env.Client, Options{Table: env.Ledger, Retry: retry})
	mustApply(t, a, mutation(t, ledger.EntryGrant, "u1", "g", "10"))
	m := mutation(t, ledger.EntryPurchase, "u1", "p", "30")

	const attempts = 20
	errs := make([]error, attempts)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			l := a
			if i%2 == 1 {
				l = b
			}
			<-start
			_, errs[i] = l.Apply(context.Background(), m)
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	var message string
	for i, err := range errs {
		e, ok := ledger.AsError(err)
		if !ok || e.Reason != ledger.ReasonInsufficientBalance {
			t.Errorf("attempt %d: %v, want %s", i, err, ledger.ReasonInsufficientBalance)
			continue
		}
		if !e.Replayed {
			fresh++
		}
		if message == "" {
			message = e.Message
		} else if e.Message != message {
			t.Errorf("attempt %d: %q, another said %q", i, e.Message, message)
		}
	}
	if fresh != 1 {
		t.Errorf("%d attempts were answered as the first, want exactly 1 (the rest replayed)", fresh)
	}
	rec, ok, err := a.request(context.Background(), "u1", "p")
	if err != nil || !ok || rec.Refusal == nil || rec.Refusal.Reason != ledger.ReasonInsufficientBalance {
		t.Errorf("the request record of p: %+v, %v, %v; want the refusal", rec, ok, err)
	}
	if acct := assertAuditClean(t, a, "u1"); acct.Version != 1 || acct.Balance.String() != "10" {
		t.Errorf("account = version %d balance %s, want 1 and 10", acct.Version, acct.Balance)
	}
}

// Outcomes that are no answer to the request are not recorded: a request
// given up on after its retries may be sent again, and applies.
func TestAnAbortedRequestMayBeSentAgain(t *testing.T) {
	t.Parallel()
	inj := &conflictInjector{conflicts: 0}
	l, _ := newLedger(t, func(c *dynamodb.Client) API { inj.API = c; return inj }, fastRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "100"))
	inj.transactions.Store(0)
	inj.conflicts = fastRetry.MaxAttempts
	m := mutation(t, ledger.EntryPurchase, "u1", "p", "30")
	if _, err := l.Apply(context.Background(), m); ledger.ReasonOf(err) != ledger.ReasonTooManyConflicts {
		t.Fatalf("purchase through %d conflicts: %v, want %s", fastRetry.MaxAttempts, err, ledger.ReasonTooManyConflicts)
	}
	if res := mustApply(t, l, m); res.Replayed || res.Balance.String() != "70" {
		t.Errorf("the same purchase again: %+v, want it applied (balance 70), not replayed", res)
	}
	assertAuditClean(t, l, "u1")
}

// The audit reads refusal records as what they are: records that name no
// entry. An entry whose request_id has a refusal record, or a refusal
// record without its reason, is the ledger's to explain.
func TestAuditOfRefusalRecords(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	ctx := context.Background()
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g", "10"))
	for _, id := range []string{"p1", "p2"} {
		if _, err := l.Apply(ctx, mutation(t, ledger.EntryPurchase, "u1", id, "30")); ledger.ReasonOf(err) != ledger.ReasonInsufficientBalance {
			t.Fatalf("purchase %s of 30 from 10: %v", id, err)
		}
	}
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u1", "g2", "10"))
	if a := assertAuditClean(t, l, "u1"); a.Version != 2 {
		t.Fatalf("account at version %d, want 2: refusals write no entry", a.Version)
	}

	// An entry that claims a refused request_id.
	stray := ledger.Entry{ID: "01JSTRAY000000000000000000", UserID: "u1", Version: 3, Type: ledger.EntryPurchase, Amount: decimal.NewFromInt(-30),
		BalanceAfter: decimal.NewFromInt(-10), RequestID: "p1", CreateTime: time.Now().UTC()}
	if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: entryItem(stray)}); err != nil {
		t.Fatal(err)
	}
	a, err := l.Audit(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(a.Findings, func(f ledger.Finding) bool {
		return f.Kind == ledger.FindingRequestMismatch && strings.Contains(f.Found, ledger.ReasonInsufficientBalance)
	}) {
		t.Errorf("findings %v, want a %s for the entry of a refused request", a.Findings, ledger.FindingRequestMismatch)
	}

	// A refusal record without its reason.
	_, err = env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &env.Ledger, Key: requestKey("u1", "p2"),
		UpdateExpression: aws.String("REMOVE refusal_reason")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Audit(ctx, "u1"); err == nil || !strings.Contains(err.Error(), "refusal_reason") {
		t.Errorf("audit of a refusal record without a reason: %v, want an error naming refusal_reason", err)
	}
}

// A user whose only request was refused has a refusal record and nothing
// else: no account item, no entry, and an audit without findings. Reads
// write nothing. (Moved from the API's TestBalanceOfANewUser, which counted
// the items of the table.)
func TestAUserWithARefusalOnly(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	ctx := context.Background()
	if a, err := l.Balance(ctx, "nobody"); err != nil || a.Version != 0 || !a.Balance.IsZero() || a.Status != ledger.StatusActive {
		t.Errorf("balance of a new user: %+v, %v; want 0, version 0, active", a, err)
	}
	if _, _, err := l.Entries(ctx, "nobody", ledger.EntryQuery{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(ctx, mutation(t, ledger.EntryPurchase, "nobody", "p", "1")); ledger.ReasonOf(err) != ledger.ReasonInsufficientBalance {
		t.Fatalf("purchase by a new user: %v, want %s", err, ledger.ReasonInsufficientBalance)
	}
	out, err := env.Client.Scan(ctx, &dynamodb.ScanInput{TableName: &env.Ledger, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 1 || out.Items[0]["SK"].(*types.AttributeValueMemberS).Value != requestPrefix+"p" {
		t.Errorf("reads and a refused purchase wrote %d items (%v), want the refusal's record only", len(out.Items), out.Items)
	}
	if a, err := l.Audit(ctx, "nobody"); err != nil || len(a.Findings) != 0 || a.Account.Version != 0 {
		t.Errorf("audit of a user with a refusal only: %+v, %v; want no account, no findings", a, err)
	}
}

// Expiring points through the store: each entry and the aggregate keep the
// buckets; a purchase after an expiry writes the EXPIRATION first, in its
// own transaction; refunds go back where the purchase drew; the audit
// folds the buckets and finds them as stored.
func TestExpiringPointsInTheStore(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	l := New(env.Client, Options{Table: env.Ledger, Now: clk.Now})
	soon, late := clk.Now().Add(time.Hour), clk.Now().Add(48*time.Hour)
	grant := func(id, amount string, expire time.Time) {
		m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: id, Amount: amount, Expire: expire}, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, l, m)
	}
	grant("g1", "4", soon)
	grant("g2", "6", late)
	grant("g3", "5", time.Time{})
	p := mustApply(t, l, mutation(t, ledger.EntryPurchase, "u", "p", "5"))
	if len(p.Entry.Draws) != 2 || !p.Entry.Draws[0].Expire.Equal(soon) || !p.Entry.Draws[1].Amount.Equal(decimal.NewFromInt(1)) {
		t.Errorf("purchase drew %+v, want 4 of soon, then 1 of late", p.Entry.Draws)
	}

	clk.Add(time.Hour) // soon has expired: 0 of it left anyway; late's 5 and never's 5 stay
	clk.Add(47 * time.Hour)
	// late expires now: a purchase of 6 finds 5 spendable and is refused, writing nothing.
	if _, err := l.Apply(context.Background(), mutation(t, ledger.EntryPurchase, "u", "p2", "6")); ledger.ReasonOf(err) != ledger.ReasonInsufficientBalance {
		t.Fatalf("purchase of 6 with 5 spendable: %v, want %s", err, ledger.ReasonInsufficientBalance)
	}
	acct, err := l.Balance(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Version != 4 || !acct.Spendable(clk.Now()).Equal(decimal.NewFromInt(5)) || !acct.Balance.Equal(decimal.NewFromInt(10)) {
		t.Errorf("account = %+v: want version 4, balance 10 of which 5 spendable (late's expired, not yet on the record)", acct)
	}
	// A refund of the purchase: late's 5 expire first, on the record; then
	// the refund gives 1 back to late and 4 to soon, both expired, which
	// expire at once: three entries in one transaction.
	m, err := ledger.NewMutation(ledger.EntryRefund, ledger.Request{UserID: "u", RequestID: "r", Amount: "5", PurchaseRequestID: "p"}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	r := mustApply(t, l, m)
	if r.Entry.Version != 6 || len(r.Entry.Draws) != 2 || !r.Entry.Draws[0].Expire.Equal(late) || !r.Entry.Draws[1].Expire.Equal(soon) {
		t.Errorf("refund = %+v, want version 6 giving back 1 to late, then 4 to soon", r.Entry)
	}
	entries, err := l.EntriesAfter(context.Background(), "u", 4, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []ledger.EntryType
	for _, e := range entries {
		got = append(got, e.Type)
	}
	if want := []ledger.EntryType{ledger.EntryExpiration, ledger.EntryRefund, ledger.EntryExpiration}; !slices.Equal(got, want) ||
		!entries[0].Amount.Equal(decimal.NewFromInt(-5)) || !entries[2].Amount.Equal(decimal.NewFromInt(-5)) || entries[0].RequestID != "" {
		t.Errorf("entries after version 4 = %+v, want %v of -5, 5, -5", entries, want)
	}
	mustApply(t, l, mutation(t, ledger.EntryPurchase, "u", "p3", "5")) // the never-expiring 5
	if acct := assertAuditClean(t, l, "u"); !acct.Balance.IsZero() || acct.Version != 8 || len(acct.Buckets) != 0 {
		t.Errorf("account = %+v, want balance 0 at version 8, no buckets", acct)
	}
}

// An account written before points expired (no buckets attribute) holds
// its balance as never-expiring points.
func TestAnAccountFromBeforeExpiry(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, DefaultRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u", "g", "10"))
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &env.Ledger, Key: accountKey("u"), UpdateExpression: aws.String("REMOVE buckets"),
	})
	if err != nil {
		t.Fatal(err)
	}
	l = New(env.Client, Options{Table: env.Ledger}) // no cache
	if res := mustApply(t, l, mutation(t, ledger.EntryPurchase, "u", "p", "4")); !res.Balance.Equal(decimal.NewFromInt(6)) {
		t.Errorf("purchase on an account from before expiry: balance %s, want 6", res.Balance)
	}
	assertAuditClean(t, l, "u")
}
