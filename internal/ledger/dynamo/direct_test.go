package dynamo

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// transactionRecorder keeps the last transaction a ledger sends to
// DynamoDB Local, which it passes on.
type transactionRecorder struct {
	API
	mu   sync.Mutex
	last []types.TransactWriteItem
}

func (r *transactionRecorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	r.mu.Lock()
	r.last = in.TransactItems
	r.mu.Unlock()
	return r.API.TransactWriteItems(ctx, in, opts...)
}

// The load test's direct baseline sends SingleTransaction without ledgerd:
// it must be, item for item, what the write path sends for the same
// mutation on the same account at the same time, committing alone (so
// that the baseline measures this path, and cannot drift from it). The
// first grant of a user, with the account as the baseline starts it (a
// user id alone), a purchase, which draws on the buckets, and a grant that
// expires, which writes the index of next expiries too.
func TestSingleTransactionIsTheWritePaths(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	rec := &transactionRecorder{API: env.Client}
	now := time.Date(2026, 11, 25, 12, 0, 0, 123456789, time.UTC)
	l := New(rec, Options{Table: env.Ledger, MaxBatch: 1, Now: func() time.Time { return now }})
	acct := ledger.Account{UserID: "u1"}
	steps := []ledger.Mutation{
		mutation(t, ledger.EntryGrant, "u1", "g1", "100"),
		mutation(t, ledger.EntryPurchase, "u1", "p1", "30"),
		expiringGrant(t, "g2", "5", now.Add(time.Hour)),
		mutation(t, ledger.EntryPurchase, "u1", "p2", "70.5"),
	}
	for _, m := range steps {
		res := mustApply(t, l, m)
		in, e, after := SingleTransaction(env.Ledger, acct, m, res.Entry.ID, now)
		rec.mu.Lock()
		sent := rec.last
		rec.mu.Unlock()
		if !reflect.DeepEqual(in.TransactItems, sent) {
			t.Errorf("%s %s: SingleTransaction's items\n%s\nthe write path's\n%s", m.Type, m.RequestID, describeItems(in.TransactItems), describeItems(sent))
		}
		if !reflect.DeepEqual(e, res.Entry) {
			t.Errorf("%s %s: SingleTransaction's entry %+v, the write path's %+v", m.Type, m.RequestID, e, res.Entry)
		}
		read, err := l.Balance(context.Background(), "u1")
		if err != nil {
			t.Fatal(err)
		}
		if after.Version != read.Version || !after.Balance.Equal(read.Balance) || !after.Held.Equal(read.Held) || len(after.Buckets) != len(read.Buckets) {
			t.Errorf("%s %s: SingleTransaction's account after %+v, the ledger's %+v", m.Type, m.RequestID, after, read)
		}
		acct = after
	}
}

func expiringGrant(tb testing.TB, requestID, amount string, expire time.Time) ledger.Mutation {
	tb.Helper()
	m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: "u1", RequestID: requestID, Amount: amount, Expire: expire}, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// describeItems shows items with their values, not their pointers.
func describeItems(items []types.TransactWriteItem) string {
	var s string
	for i, it := range items {
		switch {
		case it.Put != nil:
			s += sprintItem(i, "put", it.Put.Item, it.Put.ConditionExpression)
		case it.Update != nil:
			s += sprintItem(i, "update "+*it.Update.UpdateExpression, it.Update.ExpressionAttributeValues, it.Update.ConditionExpression)
		case it.ConditionCheck != nil:
			s += sprintItem(i, "check", it.ConditionCheck.ExpressionAttributeValues, it.ConditionCheck.ConditionExpression)
		case it.Delete != nil:
			s += sprintItem(i, "delete", it.Delete.Key, it.Delete.ConditionExpression)
		}
	}
	return s
}

func sprintItem(i int, what string, values map[string]types.AttributeValue, cond *string) string {
	s := "  " + what
	if cond != nil {
		s += " if " + *cond
	}
	for k, v := range values {
		s += " " + k + "=" + attributeString(v)
	}
	return s + "\n"
}

func attributeString(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberM:
		s := "{"
		for k, w := range v.Value {
			s += k + ":" + attributeString(w) + " "
		}
		return s + "}"
	case *types.AttributeValueMemberL:
		s := "["
		for _, w := range v.Value {
			s += attributeString(w) + " "
		}
		return s + "]"
	}
	return "?"
}
