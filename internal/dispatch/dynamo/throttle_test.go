package dynamo_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dispatch"
	dispatchdynamo "github.com/pointledger/pointledger/internal/dispatch/dynamo"
	"github.com/pointledger/pointledger/internal/ledger"
)

// throttlingDB cancels the first n transactions that write a queue with
// ThrottlingError reasons, as DynamoDB does when a partition is over its
// capacity: a fault DynamoDB Local never produces (it has no partitions),
// hence this stand-in in front of it. Nothing of a cancelled one is
// written.
type throttlingDB struct {
	dispatchdynamo.DB
	n         atomic.Int64
	throttled atomic.Int64
}

func (t *throttlingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if t.n.Add(-1) >= 0 {
		t.throttled.Add(1)
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("ThrottlingError")
		}
		return nil, &types.TransactionCanceledException{Message: aws.String("injected: throughput exceeds the partition's"), CancellationReasons: reasons}
	}
	return t.DB.TransactWriteItems(ctx, in, opts...)
}

// A queue's write that DynamoDB throttles is written again after a back-off,
// by the dispatcher that holds the claim: every event is delivered once,
// none sent again, and their rows are on the record. (Given up, the 2xx
// were not recorded: the queue waited for its claim to end, 40 s, and its
// events were sent a second time.)
func TestThrottledQueueWritesAreWrittenAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	rcv.inOrder = true
	ep := f.endpoint(rcv)
	db := &throttlingDB{DB: f.env.Client}
	db.n.Store(4)
	d := f.dispatcherOn(db, dispatch.Options{})
	for i := range 6 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "hot", RequestID: fmt.Sprintf("g%d", i), Amount: "5"})
	}
	entries := f.entries("hot")
	f.feed(entries, d)
	waitFor(t, "every event acknowledged", func() bool { return rcv.ackedCount() == len(entries) })
	settled(t, d)
	rcv.check()
	if got := rcv.ackedVersions("hot"); !slices.Equal(got, versions(1, int64(len(entries)))) {
		t.Errorf("versions acknowledged %v, want 1..%d", got, len(entries))
	}
	if db.throttled.Load() == 0 {
		t.Fatal("no write was throttled: the test tested nothing")
	}
	if n := rcv.requests(); n != len(entries) {
		t.Errorf("%d requests for %d events, %d queue writes throttled: want each event sent once", n, len(entries), db.throttled.Load())
	}
	rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "hot", States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}})
	if err != nil || len(rows) != len(entries) {
		t.Errorf("ListDeliveries: %d rows SUCCEEDED (%v), want the %d events' on the record", len(rows), err, len(entries))
	}
}
