package projection

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// snapshot reads every item of the history table, keyed by PK and SK,
// without the state's update_time (when it was written, not what).
func (f *fixture) snapshot(t *testing.T) map[string]map[string]ddbtypes.AttributeValue {
	t.Helper()
	out := map[string]map[string]ddbtypes.AttributeValue{}
	p := dynamodb.NewScanPaginator(f.env.Client, &dynamodb.ScanInput{TableName: &f.env.History, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			delete(item, "update_time")
			out[fmt.Sprint(item["PK"], item["SK"])] = item
		}
	}
	return out
}

func TestRebuildMakesTheSameHistoryAsTheStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 10)
	stop := run(f.projector("p", Options{}))
	f.storm(t, users, 8, 300, 1)
	f.waitCaughtUp(t, users)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fromStream := f.snapshot(t)

	for _, item := range fromStream {
		if _, err := f.env.Client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: &f.env.History, Key: map[string]ddbtypes.AttributeValue{"PK": item["PK"], "SK": item["SK"]},
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.history.RebuildAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != len(users) {
		t.Errorf("rebuilt %d users, want %d", n, len(users))
	}
	fromLedger := f.snapshot(t)
	if len(fromLedger) != len(fromStream) {
		t.Fatalf("rebuild wrote %d items, the stream %d", len(fromLedger), len(fromStream))
	}
	for k, want := range fromStream {
		if got := fromLedger[k]; !reflect.DeepEqual(got, want) {
			t.Errorf("item %s: rebuilt %v, from the stream %v", k, got, want)
		}
	}
	f.assertHistoryEqualsLedger(t, users)
}

func TestRebuildRepairsAnAlteredHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 3)
	f.storm(t, users, 4, 60, 1)
	if _, err := f.history.RebuildAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Corrupt: change an amount, add a version the ledger lacks, push the state ahead.
	ctx := context.Background()
	pk := ddbtypes.AttributeValueMemberS{Value: dynamo.PartitionKey("u0")}
	_, err := f.env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &f.env.History,
		Key:                       map[string]ddbtypes.AttributeValue{"PK": &pk, "SK": ddbattr.S(historySK(1))},
		UpdateExpression:          aws.String("SET amount = :a"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":a": &ddbtypes.AttributeValueMemberN{Value: "12345"}}})
	if err != nil {
		t.Fatal(err)
	}
	bogus := f.history.historyItem(ledger.Entry{UserID: "u0", Version: 999, Type: ledger.EntryGrant, Amount: decimal.NewFromInt(1), CreateTime: time.Now()})
	if _, err := f.env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &f.env.History, Item: bogus}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &f.env.History, Item: f.history.stateItem(history.State{UserID: "u0", Version: 999})}); err != nil {
		t.Fatal(err)
	}
	if err := f.history.Rebuild(ctx, "u0"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, users)
}

// afterRebuildRead runs hook once, right after a rebuild has read the ledger.
type afterRebuildRead struct {
	Ledger
	once sync.Once
	hook func()
}

func (l *afterRebuildRead) EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error) {
	es, err := l.Ledger.EntriesAfter(ctx, user, after, limit)
	if after == 0 {
		l.once.Do(l.hook)
	}
	return es, err
}

// afterWriting runs hook once, right after a write (a put or a transaction)
// of the history item with sort key sk.
type afterWriting struct {
	HistoryAPI
	sk   string
	once sync.Once
	hook func()
}

func (d *afterWriting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := d.HistoryAPI.PutItem(ctx, in, o...)
	if sk, _ := in.Item["SK"].(*ddbtypes.AttributeValueMemberS); err == nil && sk != nil && sk.Value == d.sk {
		d.once.Do(d.hook)
	}
	return out, err
}

func (d *afterWriting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := d.HistoryAPI.TransactWriteItems(ctx, in, o...)
	for _, it := range in.TransactItems {
		if it.Put == nil {
			continue
		}
		if sk, _ := it.Put.Item["SK"].(*ddbtypes.AttributeValueMemberS); err == nil && sk != nil && sk.Value == d.sk {
			d.once.Do(d.hook)
		}
	}
	return out, err
}

// The projector applies an entry between a rebuild's read of the ledger and
// its writes: the entry's history item stays (it is not "extra"), and the
// state stays with it.
func TestRebuildWhileTheProjectorAppliesANewEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g1", "10", "")
	f.apply(t, ledger.EntryPurchase, "u1", "p", "4", "")
	all, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, all); err != nil { // the projector is at version 2
		t.Fatal(err)
	}
	l := &afterRebuildRead{Ledger: f.store, hook: func() {
		f.apply(t, ledger.EntryRefund, "u1", "r", "3", "p") // version 3, during the rebuild
		es, err := f.store.EntriesAfter(ctx, "u1", 2, 10)
		if err == nil {
			err = f.history.Apply(ctx, es) // ...applied by the projector
		}
		if err != nil {
			t.Error(err)
		}
	}}
	if err := NewHistory(f.env.Client, f.env.History, l, nil).Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// The projector applies a refund after a rebuild rewrote the refunded
// purchase, in the middle of the rebuild: the refund counts once.
func TestRebuildWhileTheProjectorAppliesARefund(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g1", "10", "")
	f.apply(t, ledger.EntryPurchase, "u1", "p", "4", "")
	for i := range 120 { // the rebuild takes more than one transaction
		f.apply(t, ledger.EntryGrant, "u1", fmt.Sprint("g", i+2), "1", "")
	}
	f.apply(t, ledger.EntryRefund, "u1", "r", "3", "p")
	all, err := f.store.EntriesAfter(ctx, "u1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refund := len(all) - 1
	if err := f.history.Apply(ctx, all[:refund]); err != nil { // the projector is just before the refund
		t.Fatal(err)
	}
	db := &afterWriting{HistoryAPI: f.env.Client, sk: historySK(2), hook: func() {
		if err := f.history.Apply(ctx, all[refund:]); err != nil { // the projector applies the refund
			t.Error(err)
		}
	}}
	if err := NewHistory(db, f.env.History, f.store, nil).Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}
