package dynamo

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The naive baseline writes accounts with AccountItem: it must be the item
// the write path leaves, so that its accounts read as the ledger's do. An
// account with expiring points and an open hold (which draws some of them),
// written by Apply, is read raw, decoded, and built again: the same item.
func TestAccountItemIsTheItemTheWritePathLeaves(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, fastRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u", "g1", "100"))
	mustApply(t, l, holdRequest(t, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "10", Expire: time.Now().Add(time.Hour)}))
	mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "4"}))
	res, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &env.Ledger, Key: AccountKey("u"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	a, ok, err := DecodeAccount(res.Item)
	if err != nil || !ok || len(a.Holds) != 1 || len(a.Buckets) != 2 {
		t.Fatalf("DecodeAccount = %+v, %v, %v; want an account with a hold and two buckets", a, ok, err)
	}
	if got := AccountItem(a); !reflect.DeepEqual(got, res.Item) {
		t.Errorf("AccountItem = %v\nstored %v", got, res.Item)
	}
	e, err := l.EntriesAfter(context.Background(), "u", 0, 1)
	if err != nil || len(e) != 1 {
		t.Fatalf("entries %v, %v", e, err)
	}
	entry, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &env.Ledger, Key: entryKey("u", 1), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if got := EntryItem(e[0]); !reflect.DeepEqual(got, entry.Item) {
		t.Errorf("EntryItem = %v\nstored %v", got, entry.Item)
	}
}
