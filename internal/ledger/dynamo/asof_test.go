package dynamo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

var _ ledgertest.AsOfStore = (*Ledger)(nil)

// TestAsOfContract runs the contract of the account at a time and of
// statements with group commit and without.
func TestAsOfContract(t *testing.T) {
	t.Parallel()
	for _, maxBatch := range []int{0, 1} {
		t.Run(fmt.Sprint("max batch ", maxBatch), func(t *testing.T) {
			t.Parallel()
			ledgertest.AsOfContract(t, func(t *testing.T, now func() time.Time) ledgertest.AsOfStore {
				env := dynamotest.New(t)
				return New(env.Client, Options{Table: env.Ledger, Now: now, MaxBatch: maxBatch})
			})
		})
	}
}

// readCounter counts the items DynamoDB read for the ledger's queries and
// gets: what a read costs, whatever it returned.
type readCounter struct {
	API
	items atomic.Int64
}

func (c *readCounter) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := c.API.Query(ctx, in, opts...)
	if err == nil {
		c.items.Add(int64(out.ScannedCount))
	}
	return out, err
}

func (c *readCounter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := c.API.GetItem(ctx, in, opts...)
	if err == nil && len(out.Item) > 0 {
		c.items.Add(1)
	}
	return out, err
}

// TestSnapshotsAreTheAggregate: concurrent mutations, committed in
// groups, write a snapshot each time the account passes a multiple of
// ledger.SnapshotEvery, and each is the fold of the entries up to its
// version, holds, buckets and pending lots too; the account at any time
// reads one snapshot and at most maxAsOfEntries entries.
func TestSnapshotsAreTheAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := dynamotest.New(t)
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	counter := &readCounter{API: env.Client}
	l := New(counter, Options{Table: env.Ledger, Now: clk.Now})
	ledgertest.Must(t, l, ledger.EntryGrant, ledger.Request{RequestID: "seed", Amount: "100000"})
	var times []time.Time
	for round := range 8 {
		var wg sync.WaitGroup
		for w := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("r%d-%d", round, w)
				var err error
				switch w % 5 {
				case 0:
					_, err = l.Apply(ctx, mustMutation(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: id, Amount: "3", Expire: clk.Now().Add(time.Duration(1+w%3) * time.Hour)}))
				case 1:
					_, err = l.Apply(ctx, mustMutation(t, ledger.EntryGrant, ledger.Request{UserID: "u", RequestID: id, Amount: "2", Effective: clk.Now().Add(time.Duration(1+w) * time.Minute)}))
				case 2:
					_, err = l.Apply(ctx, mustMutation(t, ledger.EntryHold, ledger.Request{UserID: "u", RequestID: id, Amount: "1", Expire: clk.Now().Add(time.Duration(10+w) * time.Minute)}))
				default:
					_, err = l.Apply(ctx, mustMutation(t, ledger.EntryPurchase, ledger.Request{UserID: "u", RequestID: id, Amount: "1"}))
				}
				if e, ok := ledger.AsError(err); err != nil && (!ok || !e.Kind.Final()) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		times = append(times, clk.Now())
		clk.Add(20 * time.Minute)
	}
	acct := assertAuditClean(t, l, "u")
	entries, err := l.EntriesAfter(ctx, "u", 0, int(acct.Version))
	if err != nil {
		t.Fatal(err)
	}
	out, err := env.Client.Query(ctx, &dynamodb.QueryInput{
		TableName:              &env.Ledger,
		ConsistentRead:         aws.Bool(true),
		KeyConditionExpression: aws.String("PK = :pk AND begins_with(SK, :s)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": ddbattr.S(partitionKey("u")), ":s": ddbattr.S(snapshotPrefix),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := acct.Version / ledger.SnapshotEvery; int64(len(out.Items)) < want || len(out.Items) == 0 {
		t.Fatalf("%d snapshots of %d entries, want %d", len(out.Items), acct.Version, want)
	}
	prev := int64(0)
	for _, item := range out.Items {
		snap, _, err := decodeAccount(item)
		if err != nil {
			t.Fatal(err)
		}
		folded, _, err := ledger.Fold("u", entries[:snap.Version])
		if err != nil {
			t.Fatal(err)
		}
		if !sameAggregate(snap, folded) {
			t.Errorf("snapshot at version %d:\n%+v\nthe fold of its entries:\n%+v", snap.Version, snap, folded)
		}
		if snap.Version <= prev || snap.Version-prev >= maxAsOfEntries || snap.Version/ledger.SnapshotEvery == prev/ledger.SnapshotEvery {
			t.Errorf("snapshot at version %d after one at %d", snap.Version, prev)
		}
		prev = snap.Version
	}
	// Each at a time: at most one snapshot and maxAsOfEntries entries read.
	for _, at := range times {
		counter.items.Store(0)
		a, err := l.AccountAt(ctx, "u", at)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ledger.AccountAsOf("u", ledger.Account{}, entries, at)
		if !sameAggregate(a, want) {
			t.Errorf("as of %s: %+v, the fold from version 1: %+v", at, a, want)
		}
		if n := counter.items.Load(); n > 1+maxAsOfEntries {
			t.Errorf("as of %s read %d items, more than %d", at, n, 1+maxAsOfEntries)
		}
	}
}

// sameAggregate says whether a and b are the same aggregate: balance, held,
// pending, version, times and what each bucket, hold and lot holds.
func sameAggregate(a, b ledger.Account) bool {
	return a.Version == b.Version && a.Balance.Equal(b.Balance) && a.Held.Equal(b.Held) && a.Pending.Equal(b.Pending) &&
		a.UpdateTime.Equal(b.UpdateTime) && a.CreateTime.Equal(b.CreateTime) &&
		slices.EqualFunc(a.Buckets, b.Buckets, func(x, y ledger.Bucket) bool { return x.Expire.Equal(y.Expire) && x.Amount.Equal(y.Amount) }) &&
		slices.EqualFunc(a.Holds, b.Holds, func(x, y ledger.Hold) bool {
			return x.RequestID == y.RequestID && x.Amount.Equal(y.Amount) && x.ExpireTime.Equal(y.ExpireTime) && x.Version == y.Version
		}) &&
		slices.EqualFunc(a.PendingLots, b.PendingLots, func(x, y ledger.PendingLot) bool {
			return x.GrantRequestID == y.GrantRequestID && x.Amount.Equal(y.Amount) && x.EffectiveTime.Equal(y.EffectiveTime)
		})
}

func mustMutation(tb testing.TB, typ ledger.EntryType, r ledger.Request) ledger.Mutation {
	tb.Helper()
	m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
