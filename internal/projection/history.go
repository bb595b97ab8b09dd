package projection

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// History table layout (the user is the partition key, as in the ledger):
//
//	PK=ACCT#<user> SK=S                        state: last applied version, balance, pending, totals
//	PK=ACCT#<user> SK=H#<version, 20 digits>   history item: the entry's attributes
const (
	stateSK       = "S"
	historyPrefix = "H#"
	timeLayout    = "2006-01-02T15:04:05.000000Z" // as the ledger writes create_time
	maxTxItems    = 100                           // TransactWriteItems limit
	// A batch of entries, each possibly a refund that updates its purchase's
	// item, plus the state, must fit in one transaction.
	maxBatch = (maxTxItems - 1) / 2
)

func historySK(version int64) string { return fmt.Sprintf("%s%020d", historyPrefix, version) }

// HistoryAPI is the part of the DynamoDB client the history uses.
type HistoryAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Ledger is what the projection reads of the ledger: entries to fill gaps
// and rebuild, accounts to find users that are behind.
type Ledger interface {
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error)
	Accounts(ctx context.Context, segments int, fn func(ledger.Account) error) error
}

// History is the per-user history projection.
type History struct {
	db     HistoryAPI
	table  string
	ledger Ledger
	tokens *pagetoken.Codec
	now    func() time.Time
}

// NewHistory returns the projection stored in table, reading l to fill gaps.
// tokens makes and checks List's page tokens; nil: a codec derived from
// table (pagetoken.Derived), which is no secret.
func NewHistory(db HistoryAPI, table string, l Ledger, tokens *pagetoken.Codec) *History {
	if tokens == nil {
		tokens = pagetoken.Derived(table)
	}
	return &History{db: db, table: table, ledger: l, tokens: tokens, now: time.Now}
}

func (h *History) key(user, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": ddbattr.S(dynamo.PartitionKey(user)), "SK": ddbattr.S(sk)}
}

// State reads a user's projection state (consistently); a user never
// projected has version 0.
func (h *History) State(ctx context.Context, user string) (history.State, error) {
	out, err := h.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, Key: h.key(user, stateSK), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return history.State{}, fmt.Errorf("get history state of %q: %w", user, err)
	}
	st := history.State{UserID: user}
	if len(out.Item) == 0 {
		return st, nil
	}
	var errs []error
	num := func(name string) decimal.Decimal {
		v, _ := out.Item[name].(*types.AttributeValueMemberN)
		if v == nil {
			errs = append(errs, fmt.Errorf("%s missing", name))
			return decimal.Zero
		}
		d, err := decimal.NewFromString(v.Value)
		errs = append(errs, err)
		return d
	}
	st.Version = num("version").IntPart()
	st.Balance, st.Granted, st.Spent, st.Refunded, st.Adjusted = num("balance"), num("granted"), num("spent"), num("refunded"), num("adjusted")
	if _, ok := out.Item["expired"]; ok { // states written before points expired have none
		st.Expired = num("expired")
	}
	if _, ok := out.Item["pending"]; ok { // nor pending, before points could be
		st.Pending = num("pending")
	}
	if v, ok := out.Item["last_entry_time"].(*types.AttributeValueMemberS); ok {
		st.LastEntry, err = time.Parse(timeLayout, v.Value)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return st, fmt.Errorf("decode history state of %q: %w", user, err)
	}
	return st, nil
}

func (h *History) historyItem(e ledger.Entry) map[string]types.AttributeValue {
	item := dynamo.EntryAttributes(e)
	item["PK"], item["SK"] = ddbattr.S(dynamo.PartitionKey(e.UserID)), ddbattr.S(historySK(e.Version))
	return item
}

func (h *History) stateItem(st history.State) map[string]types.AttributeValue {
	item := h.key(st.UserID, stateSK)
	item["user_id"] = ddbattr.S(st.UserID)
	item["version"] = ddbattr.Int(st.Version)
	for name, v := range map[string]decimal.Decimal{"balance": st.Balance, "pending": st.Pending, "granted": st.Granted, "spent": st.Spent, "refunded": st.Refunded, "adjusted": st.Adjusted, "expired": st.Expired} {
		item[name] = ddbattr.Decimal(v)
	}
	item["last_entry_time"] = ddbattr.S(st.LastEntry.UTC().Format(timeLayout))
	item["update_time"] = ddbattr.S(h.now().UTC().Format(timeLayout))
	return item
}

// historyVersion is the version of a history item written by historyItem.
func historyVersion(item map[string]types.AttributeValue) int64 {
	sk, _ := item["SK"].(*types.AttributeValueMemberS)
	if sk == nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimPrefix(sk.Value, historyPrefix), 10, 64)
	return v
}
