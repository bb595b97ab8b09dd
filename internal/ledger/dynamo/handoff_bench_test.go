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

// roundTrip stands for DynamoDB where only the write path's own work is to
// be measured: every account is new (GetItem finds nothing), no point kind
// but standard is defined (Query finds nothing), every
// transaction commits, each after a wait that parks the caller as a network
// round trip would.
type roundTrip struct {
	API
	wait time.Duration
}

func (r roundTrip) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	time.Sleep(r.wait)
	return &dynamodb.GetItemOutput{}, nil
}

func (r roundTrip) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	time.Sleep(r.wait)
	return &dynamodb.QueryOutput{}, nil
}

func (r roundTrip) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	time.Sleep(r.wait)
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// BenchmarkWritePathHandOffs is the write path alone, from Apply to the
// transaction it sends, with no SDK and no DynamoDB (roundTrip, 200 µs a
// call): purchases of 1 over 1000 users granted first, from 16 goroutines
// at once, as uniform sends them. cpu-ns/op is the process's CPU per
// purchase: the decision, the items, and the goroutines a purchase crosses
// (issue 37). Run:
//
//	go test -run '^$' -bench WritePathHandOffs -benchmem -count 5 ./internal/ledger/dynamo/
func BenchmarkWritePathHandOffs(b *testing.B) {
	l := New(roundTrip{wait: 200 * time.Microsecond}, Options{Table: "bench"})
	const users, clients = 1000, 16
	for i := range users {
		mustApply(b, l, mutation(b, ledger.EntryGrant, fmt.Sprint("u", i), "g", "1000000000"))
	}
	ms := make([]ledger.Mutation, b.N)
	for i := range ms {
		ms[i] = mutation(b, ledger.EntryPurchase, fmt.Sprint("u", i%users), fmt.Sprint("p", i), "1")
	}
	var next atomic.Int64
	reportCPU := dynamotest.CPU(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				if _, err := l.Apply(context.Background(), ms[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportCPU()
}
