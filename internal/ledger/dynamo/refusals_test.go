package dynamo

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

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
