package dynamo

import (
	"context"
	"slices"
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
)

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
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": ddbattr.Decimal(decimal.NewFromInt(11))},
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
