package baseline

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/migrations"
)

// DirectExec is baseline (a): the load tool sends the write path's own
// transaction (dynamo.SingleTransaction: account update, entry, request
// record, same conditions) straight to DynamoDB. It keeps each user's
// aggregate in memory and sends one transaction per user at a time, so it
// never reads and never loses a race: the ceiling for ledgerd.
type DirectExec struct {
	db    *dynamodb.Client
	table string
	read  *dynamo.Ledger // to reload an aggregate after a failed transaction

	mu    sync.Mutex
	accts map[string]*directAccount
}

type directAccount struct {
	mu   sync.Mutex
	acct ledger.Account
}

func NewDirectExec(db *dynamodb.Client, table string) *DirectExec {
	return &DirectExec{db: db, table: table, read: dynamo.New(db, dynamo.Options{Table: table}), accts: map[string]*directAccount{}}
}

func (x *DirectExec) account(user string) *directAccount {
	x.mu.Lock()
	defer x.mu.Unlock()
	a, ok := x.accts[user]
	if !ok {
		a = &directAccount{acct: ledger.Account{UserID: user}}
		x.accts[user] = a
	}
	return a
}

func (x *DirectExec) Do(ctx context.Context, o drive.Op) drive.Outcome {
	m, code := baselineMutation(o)
	if code != "" {
		return drive.Outcome{Code: code}
	}
	a := x.account(o.User)
	a.mu.Lock()
	defer a.mu.Unlock()
	if m.Spends() && a.acct.Balance.LessThan(m.Amount) {
		return drive.Outcome{Code: connect.CodeFailedPrecondition.String()}
	}
	now := time.Now()
	in, e, after := dynamo.SingleTransaction(x.table, a.acct, m, ulid.Make().String(), now)
	ctx, cancel := context.WithTimeout(ctx, drive.RequestTimeout)
	defer cancel()
	if _, err := x.db.TransactWriteItems(ctx, in); err != nil {
		// Not expected (ids are fresh, one transaction per user at a
		// time): reload the aggregate and report the failure.
		if acct, rerr := x.read.Balance(ctx, o.User); rerr == nil {
			a.acct = acct
		}
		if ctx.Err() != nil {
			return drive.Outcome{Code: drive.CodeOf(ctx.Err())} // a timeout, as ledgerd's would be counted
		}
		return drive.Outcome{Code: connect.CodeAborted.String()}
	}
	a.acct = after
	return drive.Outcome{Code: "ok", EntryID: e.ID, Version: e.Version}
}

// baselineMutation validates a baseline's op; baselines do grants and
// purchases only.
func baselineMutation(o drive.Op) (ledger.Mutation, string) {
	t := ledger.EntryPurchase
	switch o.Kind {
	case "purchase":
	case "grant":
		t = ledger.EntryGrant
	default:
		return ledger.Mutation{}, connect.CodeUnimplemented.String()
	}
	m, err := ledger.NewMutation(t, ledger.Request{UserID: o.User, RequestID: o.RequestID, Amount: o.Amount.String()}, ledger.DefaultScale)
	if err != nil {
		return ledger.Mutation{}, connect.CodeInvalidArgument.String()
	}
	return m, ""
}

// NaiveExec is baseline (b): how a ledger goes wrong. It reads the balance,
// and if it covers the purchase, writes the entry and the new balance in two
// unconditional writes. Concurrent purchases of one user read the same
// balance: both succeed (an overdraft when it covered one), and the second
// write of the balance undoes the first (a lost update).
type NaiveExec struct {
	db    *dynamodb.Client
	table string

	mu      sync.Mutex
	granted map[string]decimal.Decimal // acknowledged, by user
	spent   map[string]decimal.Decimal
}

func NewNaiveExec(db *dynamodb.Client, table string) *NaiveExec {
	return &NaiveExec{db: db, table: table, granted: map[string]decimal.Decimal{}, spent: map[string]decimal.Decimal{}}
}

func (x *NaiveExec) Do(ctx context.Context, o drive.Op) drive.Outcome {
	m, code := baselineMutation(o)
	if code != "" {
		return drive.Outcome{Code: code}
	}
	ctx, cancel := context.WithTimeout(ctx, drive.RequestTimeout)
	defer cancel()
	pk := &types.AttributeValueMemberS{Value: dynamo.PartitionKey(o.User)}
	res, err := x.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &x.table,
		Key: map[string]types.AttributeValue{"PK": pk, "SK": &types.AttributeValueMemberS{Value: "A"}}})
	if err != nil {
		return drive.Outcome{Code: drive.CodeOf(err)}
	}
	balance, version := decimal.Zero, int64(0)
	if b, ok := res.Item["balance"].(*types.AttributeValueMemberN); ok {
		balance, _ = decimal.NewFromString(b.Value)
	}
	if v, ok := res.Item["version"].(*types.AttributeValueMemberN); ok {
		version, _ = strconv.ParseInt(v.Value, 10, 64) // DynamoDB wrote it: an integer
	}
	if m.Spends() && balance.LessThan(m.Amount) {
		return drive.Outcome{Code: connect.CodeFailedPrecondition.String()}
	}
	balance, version = balance.Add(m.Delta()), version+1
	n := func(d fmt.Stringer) types.AttributeValue { return &types.AttributeValueMemberN{Value: d.String()} }
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	if _, err := x.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &x.table, Item: map[string]types.AttributeValue{
		"PK": pk, "SK": s(fmt.Sprintf("E#%020d", version)), "type": s(string(m.Type)), "amount": n(m.Delta()),
		"balance_after": n(balance), "request_id": s(m.RequestID),
	}}); err != nil {
		return drive.Outcome{Code: drive.CodeOf(err)}
	}
	if _, err := x.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &x.table, Item: map[string]types.AttributeValue{
		"PK": pk, "SK": s("A"), "balance": n(balance), "version": n(decimal.NewFromInt(version)),
	}}); err != nil {
		return drive.Outcome{Code: drive.CodeOf(err)}
	}
	x.mu.Lock()
	if m.Spends() {
		x.spent[o.User] = x.spent[o.User].Add(m.Amount)
	} else {
		x.granted[o.User] = x.granted[o.User].Add(m.Amount)
	}
	x.mu.Unlock()
	return drive.Outcome{Code: "ok", Version: version}
}

// Damage reads every user's final balance and says what the naive writes
// did: purchases acknowledged beyond what the user was granted
// (overdrafts), and acknowledged purchases the balance does not show (lost
// updates).
func (x *NaiveExec) Damage(ctx context.Context, amount decimal.Decimal) ([]string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var acked, overdrawn, lost, negative decimal.Decimal
	for user, granted := range x.granted {
		res, err := x.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &x.table, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: dynamo.PartitionKey(user)}, "SK": &types.AttributeValueMemberS{Value: "A"}}})
		if err != nil {
			return nil, err
		}
		balance := decimal.Zero
		if b, ok := res.Item["balance"].(*types.AttributeValueMemberN); ok {
			balance, _ = decimal.NewFromString(b.Value)
		}
		spent := x.spent[user]
		acked = acked.Add(spent)
		overdrawn = overdrawn.Add(decimal.Max(decimal.Zero, spent.Sub(granted)))
		lost = lost.Add(decimal.Max(decimal.Zero, balance.Sub(granted.Sub(spent))))
		if balance.IsNegative() {
			negative = negative.Add(decimal.NewFromInt(1))
		}
	}
	unit := func(d decimal.Decimal) string { return d.Div(amount).Round(0).String() }
	return []string{fmt.Sprintf("%s acknowledged purchases: %s overdrafts (acknowledged beyond the user's grant), %s lost updates (acknowledged but missing from the balance), %s negative balances",
		unit(acked), unit(overdrawn), unit(lost), negative)}, nil
}

// CreateTable creates a baseline's own ledger table in db, named with
// prefix (the definition ledgerd's has, stream and all), and returns its
// name.
func CreateTable(ctx context.Context, db *dynamodb.Client, prefix string) (string, error) {
	all, err := migrations.All(prefix)
	if err != nil {
		return "", err
	}
	in := all[0].Input
	if _, err := db.CreateTable(ctx, &in); err != nil {
		return "", fmt.Errorf("baseline tables: %w", err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 5*time.Minute); err != nil {
		return "", fmt.Errorf("baseline tables: %w", err)
	}
	return prefix + migrations.LedgerTable, nil
}
