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
// stored-B is what the items it adds (its entry and its request record)
// take, with the 100 bytes DynamoDB bills for each item besides its
// attributes; entry-B is its entry's size.
//
//	go test -run '^$' -bench PurchaseCapacity -benchtime 50x ./internal/ledger/dynamo/
func BenchmarkPurchaseCapacity(b *testing.B) {
	for _, buckets := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("buckets=%d", buckets), func(b *testing.B) {
			l, rec := capacityLedger(b, buckets)
			b.ResetTimer()
			for i := range b.N {
				mustApply(b, l, mutation(b, ledger.EntryPurchase, "u", fmt.Sprint("p", i), "1"))
			}
			b.StopTimer()
			items, units, accountKB := rec.totals()
			b.ReportMetric(float64(items)/float64(b.N), "items/purchase")
			b.ReportMetric(float64(units)/float64(b.N), "WCU/purchase")
			b.ReportMetric(accountKB, "account-KB")
			rec.mu.Lock()
			b.ReportMetric(float64(rec.stored)/float64(b.N), "stored-B/purchase")
			b.ReportMetric(float64(rec.entryBytes)/float64(b.N), "entry-B")
			rec.mu.Unlock()
		})
	}
}

// What an authorization and its capture write, for a user holding 1, 10
// and 100 buckets and, besides the hold of each round, 0 or 10 other open
// holds, as BenchmarkPurchaseCapacity counts it. The open holds live in
// the account item, which every mutation rewrites.
//
//	go test -run '^$' -bench HoldCapacity -benchtime 50x ./internal/ledger/dynamo/
func BenchmarkHoldCapacity(b *testing.B) {
	for _, buckets := range []int{1, 10, 100} {
		for _, open := range []int{0, 10} {
			b.Run(fmt.Sprintf("buckets=%d/open=%d", buckets, open), func(b *testing.B) {
				l, rec := capacityLedger(b, buckets)
				expire := time.Now().Add(24 * time.Hour)
				for i := range open {
					mustApply(b, l, holdRequest(b, ledger.EntryHold, ledger.Request{RequestID: fmt.Sprint("open", i), Amount: "1", Expire: expire}))
				}
				rec.reset()
				var authorize, capture [2]int // items, units
				b.ResetTimer()
				for i := range b.N {
					id := fmt.Sprint("h", i)
					mustApply(b, l, holdRequest(b, ledger.EntryHold, ledger.Request{RequestID: id, Amount: "1", Expire: expire}))
					items, units, _ := rec.totals()
					authorize[0], authorize[1] = authorize[0]+items, authorize[1]+units
					rec.reset()
					mustApply(b, l, holdRequest(b, ledger.EntryCapture, ledger.Request{RequestID: "c" + id, HoldRequestID: id}))
					items, units, _ = rec.totals()
					capture[0], capture[1] = capture[0]+items, capture[1]+units
					rec.reset()
				}
				b.StopTimer()
				_, _, accountKB := rec.totals()
				b.ReportMetric(float64(authorize[0])/float64(b.N), "items/authorize")
				b.ReportMetric(float64(authorize[1])/float64(b.N), "WCU/authorize")
				b.ReportMetric(float64(capture[0])/float64(b.N), "items/capture")
				b.ReportMetric(float64(capture[1])/float64(b.N), "WCU/capture")
				b.ReportMetric(accountKB, "account-KB")
			})
		}
	}
}

// What the sweeper's expiration of an idle user writes (Expire), for a
// user holding 1 bucket, which expires, or 10, of which the soonest
// expires, as BenchmarkPurchaseCapacity counts it: the EXPIRATION entry,
// the account, and the index of next expiries (the user's item deleted,
// and put again at the next expiry if there is one).
//
//	go test -run '^$' -bench ExpiryCapacity -benchtime 50x ./internal/ledger/dynamo/
func BenchmarkExpiryCapacity(b *testing.B) {
	for _, buckets := range []int{1, 10} {
		b.Run(fmt.Sprintf("buckets=%d", buckets), func(b *testing.B) {
			env := dynamotest.New(b)
			rec := &writeRecorder{API: env.Client, sizes: map[string]int{}}
			start := time.Now()
			now := start
			l := New(rec, Options{Table: env.Ledger, MaxBatch: 1, MaxBuckets: 100, Now: func() time.Time { return now }})
			for i := range b.N {
				for k := range buckets {
					r := ledger.Request{UserID: fmt.Sprint("u", i), RequestID: fmt.Sprint("g", k), Amount: "100",
						Expire: start.Add(time.Duration(k+1) * time.Hour)} // the first bucket expires first
					mustApply(b, l, holdRequest(b, ledger.EntryGrant, r)) // a request of any type
				}
			}
			now = start.Add(90 * time.Minute) // past the first bucket's expiry only
			rec.reset()
			b.ResetTimer()
			for i := range b.N {
				res, err := l.Expire(context.Background(), fmt.Sprint("u", i))
				if err != nil || res.Entry.Type != ledger.EntryExpiration {
					b.Fatalf("expire u%d: %+v, %v; want an expiration", i, res.Entry, err)
				}
			}
			b.StopTimer()
			items, units, accountKB := rec.totals()
			b.ReportMetric(float64(items)/float64(b.N), "items/expiry")
			b.ReportMetric(float64(units)/float64(b.N), "WCU/expiry")
			b.ReportMetric(accountKB, "account-KB")
		})
	}
}

// capacityLedger is a ledger of one user, u, granted a million points in
// each of buckets buckets, without grouping, whose transactions rec counts
// from now on.
func capacityLedger(b *testing.B, buckets int) (*Ledger, *writeRecorder) {
	env := dynamotest.New(b)
	rec := &writeRecorder{API: env.Client, sizes: map[string]int{}}
	now := time.Now()
	l := New(rec, Options{Table: env.Ledger, MaxBatch: 1, MaxBuckets: 100})
	for i := range buckets {
		r := ledger.Request{UserID: "u", RequestID: fmt.Sprint("g", i), Amount: "1000000"}
		if i > 0 {
			r.Expire = now.Add(time.Duration(24*365+i) * time.Hour) // distinct, and after the run
		}
		m, err := ledger.NewMutation(ledger.EntryGrant, r, ledger.DefaultScale)
		if err != nil {
			b.Fatal(err)
		}
		mustApply(b, l, m)
	}
	rec.reset()
	return l, rec
}

// writeRecorder counts what transactions write.
type writeRecorder struct {
	API
	mu         sync.Mutex
	items      int
	units      int
	accountKB  float64        // the last account item's size
	sizes      map[string]int // the items written, by key: an update is charged by the larger of before and after
	stored     int            // bytes of the items put that were not there before, each with DynamoDB's 100 bytes of overhead
	entryBytes int            // bytes of the entries put
}

// itemOverhead is what DynamoDB bills for the storage of each item besides
// its attributes ("DynamoDB item sizes and formats" in its developer guide).
const itemOverhead = 100

func (w *writeRecorder) reset() {
	w.mu.Lock()
	w.items, w.units, w.stored, w.entryBytes = 0, 0, 0, 0
	w.mu.Unlock()
}

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
			k := itemKey(it.Put.Item)
			if _, ok := w.sizes[k]; !ok {
				w.stored += size + itemOverhead
			}
			if sk, ok := it.Put.Item["SK"].(*types.AttributeValueMemberS); ok && IsEntryKey(sk.Value) {
				w.entryBytes += size
			}
			w.sizes[k] = size
		case it.Update != nil:
			// An update is charged by the larger of the item before and
			// after.
			k := itemKey(it.Update.Key)
			after := w.updatedSize(it.Update)
			size = max(after, w.sizes[k])
			w.sizes[k] = after
		default:
			size = 1 // a condition check: charged as a read, not a write
		}
		w.items++
		w.units += 2 * ((size + 1023) / 1024)
	}
	return out, nil
}

// updatedSize approximates an updated item's size after the update: an
// account's by its key and the values the update sets (all of its
// attributes but a few), another item's (a purchase's refunded amount, a
// hold record's state) as it was written, with what the update adds.
func (w *writeRecorder) updatedSize(u *types.Update) int {
	size := itemSize(u.Key) + 100 // the attributes it keeps: user id, status, times
	if sk, ok := u.Key["SK"].(*types.AttributeValueMemberS); !ok || sk.Value != accountSK {
		size = w.sizes[itemKey(u.Key)]
	}
	for k, v := range u.ExpressionAttributeValues {
		size += len(k) + attributeSize(v)
	}
	if sk, ok := u.Key["SK"].(*types.AttributeValueMemberS); ok && sk.Value == accountSK {
		w.accountKB = float64(size) / 1024
	}
	return size
}

func itemKey(item map[string]types.AttributeValue) string {
	pk, _ := item["PK"].(*types.AttributeValueMemberS)
	sk, _ := item["SK"].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return ""
	}
	return pk.Value + " " + sk.Value
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
