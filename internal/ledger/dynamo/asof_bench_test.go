package dynamo

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// What the account as of a time and a month's statement cost, against
// DynamoDB Local, for users with 100 and 10,000 entries (one entry about
// every 43 minutes, so a month holds about 1,000). Run:
//
//	go test -run '^$' -bench 'AsOf|Statement|PurchaseItemWrites' -benchtime 100x ./internal/ledger/dynamo/
//
// items/op is what DynamoDB read for the call (ScannedCount of its
// queries, one per item got): an as-of read stays within 1 +
// maxAsOfEntries (165) however many entries the user has. A statement
// reads the accounts at both ends and every entry of its window.

const asOfStep = 43 * time.Minute

var asOfStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// countingAPI counts items read (readCounter) and items written by
// transactions.
type countingAPI struct {
	readCounter
	written atomic.Int64
}

func (c *countingAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.API.TransactWriteItems(ctx, in, opts...)
	if err == nil {
		c.written.Add(int64(len(in.TransactItems)))
	}
	return out, err
}

// seedEntries writes about n entries for user, grants and purchases from
// 16 callers (so in groups), each call a step later than the one before.
func seedEntries(b *testing.B, l *Ledger, user string, n int) {
	b.Helper()
	mustApply(b, l, mutation(b, ledger.EntryGrant, user, "seed", "1000000000"))
	var wg sync.WaitGroup
	next := atomic.Int64{}
	next.Store(1)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				typ, amount := ledger.EntryGrant, "10"
				if i%2 == 0 {
					typ, amount = ledger.EntryPurchase, "1"
				}
				if _, err := l.Apply(context.Background(), mutation(b, typ, user, fmt.Sprintf("s%d-%d", w, i), amount)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// asOfLedger is a fresh table with users "u100" and "u10000", whose
// entries are a step apart from asOfStart.
func asOfLedger(b *testing.B) (*Ledger, *countingAPI) {
	b.Helper()
	env := dynamotest.NewFresh(b)
	api := &countingAPI{readCounter: readCounter{API: env.Client}}
	var calls atomic.Int64
	now := func() time.Time { return asOfStart.Add(time.Duration(calls.Add(1)) * asOfStep) }
	l := New(api, Options{Table: env.Ledger, Now: now})
	for _, n := range []int{100, 10000} {
		calls.Store(0)
		seedEntries(b, l, fmt.Sprint("u", n), n)
	}
	return l, api
}

func BenchmarkAsOf(b *testing.B) {
	l, api := asOfLedger(b)
	for _, n := range []int{100, 10000} {
		user := fmt.Sprint("u", n)
		acct, err := l.Balance(context.Background(), user)
		if err != nil {
			b.Fatal(err)
		}
		span := acct.UpdateTime.Sub(asOfStart)
		b.Run(fmt.Sprintf("GetBalanceAsOf/%d_entries", acct.Version), func(b *testing.B) {
			api.items.Store(0)
			for i := range b.N {
				at := asOfStart.Add(span * time.Duration(i%97+1) / 98) // spread over the user's life
				if _, err := l.AccountAt(context.Background(), user, at); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(api.items.Load())/float64(b.N), "items/op")
		})
		b.Run(fmt.Sprintf("GetStatementMonth/%d_entries", acct.Version), func(b *testing.B) {
			api.items.Store(0)
			entries := 0
			for i := range b.N {
				start := asOfStart.Add(span * time.Duration(i%7) / 8)
				st, _, err := l.Statement(context.Background(), user, ledger.StatementQuery{Start: start, End: start.AddDate(0, 1, 0), Page: ledger.Page{PageSize: ledger.MaxPageSize}})
				if err != nil {
					b.Fatal(err)
				}
				entries += int(st.ClosingVersion - st.OpeningVersion)
			}
			b.ReportMetric(float64(api.items.Load())/float64(b.N), "items/op")
			b.ReportMetric(float64(entries)/float64(b.N), "window-entries/op")
		})
	}
}

// BenchmarkPurchaseItemWrites: the items a purchase writes, one at a time
// (no group commit): 3 (entry, request record, account), and a snapshot
// every ledger.SnapshotEvery entries.
func BenchmarkPurchaseItemWrites(b *testing.B) {
	env := dynamotest.NewFresh(b)
	api := &countingAPI{readCounter: readCounter{API: env.Client}}
	l := New(api, Options{Table: env.Ledger, MaxBatch: 1})
	mustApply(b, l, mutation(b, ledger.EntryGrant, "u", "g", "1000000000"))
	api.written.Store(0)
	b.ResetTimer()
	for i := range b.N {
		mustApply(b, l, mutation(b, ledger.EntryPurchase, "u", fmt.Sprint("p", i), "1"))
	}
	b.ReportMetric(float64(api.written.Load())/float64(b.N), "items-written/op")
}
