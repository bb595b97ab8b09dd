package dynamo

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The index of next expiries (next-expiry, see migrations/0001_ledger.json)
// holds the account items that have points which expire, keyed by a shard
// of the user and the soonest expiry. It only nominates users: whatever it
// says, Expire decides on the account read consistently, so an index that
// lags the table (global secondary indexes are eventually consistent) costs
// a read, never a wrong entry.

// ExpiryShards is how many partitions the index spreads over, so that no
// index partition is hot and sweepers can share them by lease.
const ExpiryShards = 16

// ExpiryIndex is the name of the index of next expiries.
const ExpiryIndex = "next-expiry"

// expiryShard is the index partition of a user's next expiry.
func expiryShard(user string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return shardKey(int(h.Sum32() % ExpiryShards))
}

func shardKey(shard int) string { return fmt.Sprintf("X#%02d", shard) }

// DueUsers calls fn with each user the index names in shard (0 to
// ExpiryShards-1) whose next expiry is at or before t, soonest first.
func (l *Ledger) DueUsers(ctx context.Context, shard int, t time.Time, fn func(user string) error) error {
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName:              &l.table,
		IndexName:              aws.String(ExpiryIndex),
		KeyConditionExpression: aws.String("expiry_shard = :shard AND next_expiry <= :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":shard": str(shardKey(shard)),
			":t":     str(formatTime(t)),
		},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("query the index of next expiries, shard %d: %w", shard, err)
		}
		for _, item := range out.Items {
			pk, _ := item["PK"].(*types.AttributeValueMemberS)
			if pk == nil || !strings.HasPrefix(pk.Value, "ACCT#") {
				continue
			}
			if err := fn(strings.TrimPrefix(pk.Value, "ACCT#")); err != nil {
				return err
			}
		}
	}
	return nil
}
