package dynamo

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// calls counts what a Ledger asks of DynamoDB: requests, and the items its
// transactions write.
type calls struct {
	API
	requests, txItems atomic.Int64
}

func (c *calls) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.requests.Add(1)
	return c.API.GetItem(ctx, in, opts...)
}

func (c *calls) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.requests.Add(1)
	return c.API.Query(ctx, in, opts...)
}

func (c *calls) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.requests.Add(1)
	c.txItems.Add(int64(len(in.TransactItems)))
	return c.API.TransactWriteItems(ctx, in, opts...)
}

func (c *calls) reset() (requests, items int64) {
	return c.requests.Swap(0), c.txItems.Swap(0)
}

// A purchase with kinds in use costs what one without does: the same
// requests to DynamoDB and the same items written, once the instance has
// read the kinds (steady state). The kinds are read once per refresh
// interval, off the write path, not per purchase.
func TestKindsAddNoCallsNorWritesToAPurchase(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	clk := ledgertest.NewClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	counted := &calls{API: env.Client}
	l := New(counted, Options{Table: env.Ledger, Now: clk.Now})
	ledgertest.ProgramKinds(t, l, clk)
	for _, u := range []string{"plain", "kinded"} {
		ledgertest.Must(t, l, ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "g1", Amount: "1000"})
	}
	ledgertest.Must(t, l, ledger.EntryGrant, ledger.Request{UserID: "kinded", RequestID: "g2", Amount: "1000", Kind: "limited"})
	ledgertest.Must(t, l, ledger.EntryGrant, ledger.Request{UserID: "kinded", RequestID: "g3", Amount: "1000", Kind: "shop"})
	// Each user's aggregate cached, as on a busy instance.
	ledgertest.Must(t, l, ledger.EntryPurchase, ledger.Request{UserID: "plain", RequestID: "warm", Amount: "1"})
	ledgertest.Must(t, l, ledger.EntryPurchase, ledger.Request{UserID: "kinded", RequestID: "warm", Amount: "1", MerchantID: "m1"})
	counted.reset()
	ledgertest.Must(t, l, ledger.EntryPurchase, ledger.Request{UserID: "plain", RequestID: "p", Amount: "10"})
	plainRequests, plainItems := counted.reset()
	p := ledgertest.Must(t, l, ledger.EntryPurchase, ledger.Request{UserID: "kinded", RequestID: "p", Amount: "10", MerchantID: "m1", Category: "food"})
	kindRequests, kindItems := counted.reset()
	if len(p.Entry.Draws) != 1 || p.Entry.Draws[0].Kind != "limited" {
		t.Fatalf("the kinded purchase drew %+v, want limited points", p.Entry.Draws)
	}
	if kindRequests != plainRequests || kindItems != plainItems {
		t.Errorf("a purchase with kinds: %d requests writing %d items; without: %d and %d", kindRequests, kindItems, plainRequests, plainItems)
	}
	if plainRequests != 1 || plainItems != 3 {
		t.Logf("a purchase on a cached account: %d requests, %d items", plainRequests, plainItems)
	}
}

// A kind created through one instance is usable at once through another
// that read the kinds before it existed; a change of a kind reaches the
// other within twice its refresh interval.
func TestKindsAcrossInstances(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	clk := ledgertest.NewClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	a := New(env.Client, Options{Table: env.Ledger, Now: clk.Now, KindRefresh: time.Second})
	b := New(env.Client, Options{Table: env.Ledger, Now: clk.Now, KindRefresh: time.Second})
	ledgertest.Must(t, b, ledger.EntryGrant, ledger.Request{RequestID: "g0", Amount: "10"}) // b has read the kinds: none
	ledgertest.CreateKind(t, a, "shop", 20, []string{"m1"}, nil)
	if res := ledgertest.Must(t, b, ledger.EntryGrant, ledger.Request{RequestID: "g1", Amount: "5", Kind: "shop"}); res.Entry.Kind != "shop" {
		t.Fatalf("grant through b: kind %q", res.Entry.Kind)
	}
	p := ledgertest.Must(t, b, ledger.EntryPurchase, ledger.Request{RequestID: "p1", Amount: "5", MerchantID: "m1"})
	if len(p.Entry.Draws) != 1 || p.Entry.Draws[0].Kind != "shop" {
		t.Fatalf("purchase at m1 through b drew %+v", p.Entry.Draws)
	}
	ledgertest.Must(t, b, ledger.EntryGrant, ledger.Request{RequestID: "g2", Amount: "5", Kind: "shop"})
	// a moves the shop points to m2 only; b learns it within 2 s.
	c, err := ledger.NewKindChange(ledger.KindRequest{RequestID: "u1", KindID: "shop", Merchants: []string{"m2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.UpdatePointKind(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	clk.Add(2*time.Second + time.Millisecond)
	p = ledgertest.Must(t, b, ledger.EntryPurchase, ledger.Request{RequestID: "p2", Amount: "5", MerchantID: "m1"})
	if len(p.Entry.Draws) != 1 || p.Entry.Draws[0].Kind != "" {
		t.Errorf("purchase at m1 through b after the change drew %+v, want standard points only", p.Entry.Draws)
	}
}

var d = decimal.RequireFromString

// Items written before kinds (no kind attribute anywhere, buckets keyed
// by expiry alone) read as standard points.
func TestItemsFromBeforeKindsReadAsStandard(t *testing.T) {
	t.Parallel()
	expire := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	acct := ledger.Account{UserID: "u", Balance: d("30"), Version: 2, Status: ledger.StatusActive,
		Buckets: []ledger.Bucket{{Expire: expire, Amount: d("10")}}}
	item := map[string]types.AttributeValue{
		"user_id": ddbattr.S("u"), "balance": ddbattr.Decimal(d("30")), "version": ddbattr.Int(2), "status": ddbattr.S("ACTIVE"),
		"create_time": ddbattr.S(formatTime(expire)), "update_time": ddbattr.S(formatTime(expire)),
		"buckets": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{formatTime(expire): ddbattr.Decimal(d("10"))}},
	}
	got, ok, err := decodeAccount(item)
	if err != nil || !ok {
		t.Fatal(err)
	}
	if len(got.Buckets) != 2 || got.Buckets[0].Kind != "" || got.Buckets[1].Kind != "" || !got.Buckets[1].Amount.Equal(d("20")) {
		t.Errorf("buckets %+v, want standard 10 expiring and standard 20 never", got.Buckets)
	}
	// And what the store writes for standard points is what it wrote
	// before kinds: no kind attribute, the same bucket key.
	written := bucketsItem(acct.Buckets).(*types.AttributeValueMemberM).Value
	if _, ok := written[formatTime(expire)]; !ok || len(written) != 1 {
		t.Errorf("buckets item %v", written)
	}
	e := entryItem(ledger.Entry{UserID: "u", Version: 1, Type: ledger.EntryGrant, Amount: d("1"), CreateTime: expire})
	for _, name := range []string{"kind", "merchant_id", "category"} {
		if _, ok := e[name]; ok {
			t.Errorf("a standard grant's item has %s", name)
		}
	}
}
