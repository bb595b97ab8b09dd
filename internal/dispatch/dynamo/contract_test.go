package dynamo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/dispatch/dispatchtest"
	dispatchdynamo "github.com/pointledger/pointledger/internal/dispatch/dynamo"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/notice"
	noticedynamo "github.com/pointledger/pointledger/internal/notice/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/webhook"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// waitLimit is as long as a busy machine may need for what the benchmark
// waits for (dispatchtest's, for its own waits).
var waitLimit = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("DISPATCH_WAIT")); err == nil {
		return d
	}
	return 2 * time.Minute
}()

// The dispatcher's contract on DynamoDB Local: a ledger and a webhooks
// table of their own per case.
func TestContract(t *testing.T) {
	t.Parallel()
	dispatchtest.Contract(t, newEnv)
}

func newEnv(t *testing.T, now func() time.Time) dispatchtest.Env {
	t.Helper()
	env := dynamotest.New(t)
	led := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: quiet, Now: now})
	return dispatchtest.Env{
		Store:  dispatchdynamo.New(env.Client, env.Webhooks, now),
		Ledger: led,
		Crash: func(ref dispatch.QueueRef, owner string, until time.Time) error {
			_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
				TableName:        &env.Webhooks,
				Key:              map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "Q#" + ref.EndpointID + "#" + ref.UserID}, "SK": &types.AttributeValueMemberS{Value: "Q"}},
				UpdateExpression: aws.String("SET claim_owner = :ghost, claim_until = :until ADD rvn :one"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":ghost": &types.AttributeValueMemberS{Value: owner},
					":until": &types.AttributeValueMemberN{Value: fmt.Sprint(until.UnixNano())},
					":one":   &types.AttributeValueMemberN{Value: "1"},
				},
				ConditionExpression: aws.String("attribute_exists(PK)"),
			})
			return err
		},
		Throttled: func(n int64) (dispatch.Store, func() int64) {
			db := &throttlingDB{DB: env.Client}
			db.n.Store(n)
			return dispatchdynamo.New(db, env.Webhooks, now), db.throttled.Load
		},
		NoticePass: func(ctx context.Context, now func() time.Time, notify func(context.Context, webhook.Event) error) error {
			fd, err := notice.New(led, noticedynamo.NewTable(env.Client, env.Webhooks),
				projection.NewLeaseTable(env.Client, env.Leases, now), notice.Options{Now: now, Log: quiet})
			if err != nil {
				return err
			}
			_, err = fd.Pass(ctx, notify)
			return err
		},
	}
}

// throttlingDB cancels the first n transactions that write a queue with
// ThrottlingError reasons, as DynamoDB does when a partition is over its
// capacity, and throttles batch writes of rows the same way (below): a
// fault DynamoDB Local never produces (it has no partitions), hence this
// stand-in in front of it. Nothing of a cancelled one is written.
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

// BatchWriteItem, the first n times (shared with TransactWriteItems'),
// leaves every item unprocessed, as DynamoDB answers a batch write whose
// items' partitions are over their capacity; every second time of those
// it refuses the call as a whole instead (ProvisionedThroughputExceeded).
func (t *throttlingDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if n := t.n.Add(-1); n >= 0 {
		t.throttled.Add(1)
		if n%2 == 1 {
			return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("injected: throughput exceeds the partition's")}
		}
		return &dynamodb.BatchWriteItemOutput{UnprocessedItems: in.RequestItems}, nil
	}
	return t.DB.BatchWriteItem(ctx, in, opts...)
}

// sender sends to receivers on 127.0.0.1, each attempt ending at timeout.
func sender(timeout time.Duration) *webhook.Sender {
	return webhook.NewSender(webhook.Options{
		Policy:  webhook.URLPolicy{AllowHTTP: true, AllowLoopback: true},
		Timeout: timeout,
	})
}

// testEntryJSON stands for api.EntryJSON: enough of the entry to check
// what a receiver gets.
func testEntryJSON(e ledger.Entry) (json.RawMessage, error) {
	return json.Marshal(map[string]any{
		"entry_id": e.ID, "user_id": e.UserID, "version": strconv.FormatInt(e.Version, 10), "type": e.Type,
		"amount": e.Amount.String(), "create_time": webhook.FormatTimestamp(e.CreateTime),
	})
}
