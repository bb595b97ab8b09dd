package dynamo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// What one purchase writes, for a user holding 1, 10 and 100 buckets (one
// never expiring, the rest expiring at distinct times): items written and
// the write capacity they consume. DynamoDB Local reports no consumed
// capacity, so it is computed from the items' sizes by DynamoDB's rules: a
// write unit per started KB of each item written, twice in a transaction.
//
//	go test -run '^$' -bench PurchaseCapacity -benchtime 50x ./internal/ledger/dynamo/
func BenchmarkPurchaseCapacity(b *testing.B) {
	for _, buckets := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("buckets=%d", buckets), func(b *testing.B) {
			env := dynamotest.New(b)
			rec := &writeRecorder{API: env.Client}
			now := time.Now()
			l := New(rec, Options{Table: env.Ledger, MaxBatch: 1, MaxBuckets: 100})
			ctx := context.Background()
			for i := range buckets {
				r := ledger.Request{UserID: "u", RequestID: fmt.Sprint("g", i), Amount: "1000000"}
				if i > 0 {
					r.Expire = now.Add(time.Duration(24*365+i) * time.Hour) // distinct, and after the run
				}
				m, err := ledger.NewMutation(ledger.EntryGrant, r, ledger.DefaultScale)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := l.Apply(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			rec.reset()
			b.ResetTimer()
			for i := range b.N {
				if _, err := l.Apply(ctx, mutation(b, ledger.EntryPurchase, "u", fmt.Sprint("p", i), "1")); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			items, units, accountKB := rec.totals()
			b.ReportMetric(float64(items)/float64(b.N), "items/purchase")
			b.ReportMetric(float64(units)/float64(b.N), "WCU/purchase")
			b.ReportMetric(accountKB, "account-KB")
		})
	}
}

// writeRecorder counts what transactions write.
type writeRecorder struct {
	API
	mu        sync.Mutex
	items     int
	units     int
	accountKB float64 // the last account item's size
}

func (w *writeRecorder) reset() { w.mu.Lock(); w.items, w.units = 0, 0; w.mu.Unlock() }

func (w *writeRecorder) totals() (int, int, float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.items, w.units, w.accountKB
}

func (w *writeRecorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := w.API.TransactWriteItems(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, it := range in.TransactItems {
		var size int
		switch {
		case it.Put != nil:
			size = itemSize(it.Put.Item)
		case it.Update != nil:
			// An update is charged by the larger of the item before and
			// after; the account after a purchase is about its size before.
			size = w.updatedSize(it.Update)
		default:
			size = 1 // a condition check: charged as a read, not a write
		}
		w.items++
		w.units += 2 * ((size + 1023) / 1024)
	}
	return out, nil
}

// updatedSize approximates an updated item's size by its key and the values
// the update sets (the account's are all of its attributes but a few).
func (w *writeRecorder) updatedSize(u *types.Update) int {
	size := itemSize(u.Key) + 100 // the attributes it keeps: user id, status, times
	for k, v := range u.ExpressionAttributeValues {
		size += len(k) + attributeSize(v)
	}
	if sk, ok := u.Key["SK"].(*types.AttributeValueMemberS); ok && sk.Value == accountSK {
		w.accountKB = float64(size) / 1024
	}
	return size
}

// itemSize is an item's size as DynamoDB counts it: names and values.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + attributeSize(v)
	}
	return n
}

func attributeSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return (len(v.Value)+1)/2 + 1
	case *types.AttributeValueMemberBOOL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, x := range v.Value {
			n += len(k) + attributeSize(x) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, x := range v.Value {
			n += attributeSize(x) + 1
		}
		return n
	}
	return 1
}
