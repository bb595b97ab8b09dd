package dynamo

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

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
