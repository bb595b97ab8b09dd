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

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// The index of next expiries lives in the ledger table itself, beside the
// accounts it indexes: for each account with something due by time
// (points or holds that expire, grants pending until their effective
// time), one item
//
//	PK=EXPIRY#X#<shard, 00..15>  SK=<next due time (ledger.Account.NextDue)>#<user>
//
// written in the same transaction as the account whenever that time
// changes (the old item deleted, the new one put), so it is never
// stale and an account whose points never expire never touches it. The
// sweeper queries a shard for the items up to now (DueUsers). It only
// nominates: Expire decides on the account read consistently. (A global
// secondary index would do the same, but DynamoDB Local maintains one on
// every write to the table, which cost a hot user a fifth of its speed.)

// ExpiryShards is how many partitions the index spreads over, so that no
// index partition is hot and sweepers can share them by lease.
const ExpiryShards = 16

const expiryPrefix = "EXPIRY#"

// expiryShard is the index partition of a user's next expiry.
func expiryShard(user string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return int(h.Sum32() % ExpiryShards)
}

func expiryPK(shard int) string { return fmt.Sprintf("%sX#%02d", expiryPrefix, shard) }

func expiryIndexKey(user string, next time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(expiryPK(expiryShard(user))), "SK": ddbattr.S(formatTime(next) + "#" + user)}
}

// expiryIndexItems are the writes that keep the index of next expiries
// right as an account goes from before to after: none while its soonest
// expiry stays.
func expiryIndexItems(table *string, before, after ledger.Account) []types.TransactWriteItem {
	was, is := before.NextDue(), after.NextDue()
	if was.Equal(is) {
		return nil
	}
	var items []types.TransactWriteItem
	if !was.IsZero() {
		items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: table, Key: expiryIndexKey(after.UserID, was)}})
	}
	if !is.IsZero() {
		item := expiryIndexKey(after.UserID, is)
		item["user_id"] = ddbattr.S(after.UserID)
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: table, Item: item}})
	}
	return items
}

// DueUsers calls fn with each user the index names in shard (0 to
// ExpiryShards-1) whose next expiry is at or before t, soonest first.
func (l *Ledger) DueUsers(ctx context.Context, shard int, t time.Time, fn func(user string) error) error {
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName:              &l.table,
		ConsistentRead:         aws.Bool(true),
		KeyConditionExpression: aws.String("PK = :pk AND SK <= :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": ddbattr.S(expiryPK(shard)),
			":t":  ddbattr.S(formatTime(t) + "#~"), // every user of an expiry at t: '~' sorts after the id alphabet
		},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("query the index of next expiries, shard %d: %w", shard, err)
		}
		for _, item := range out.Items {
			sk, _ := item["SK"].(*types.AttributeValueMemberS)
			if sk == nil {
				continue
			}
			_, user, ok := strings.Cut(sk.Value, "#")
			if !ok {
				continue
			}
			if err := fn(user); err != nil {
				return err
			}
		}
	}
	return nil
}
