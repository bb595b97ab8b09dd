// Package baseline has the load test's baselines: executors that send the
// ledger's writes straight to DynamoDB, without ledgerd: the write path's
// own transaction (the ceiling for ledgerd), and a naive read-then-write
// (what the write path's conditions prevent).
package baseline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// NewDirectExec sends to table through db.
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

// NewNaiveExec writes to table through db.
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
	res, err := x.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &x.table, Key: dynamo.AccountKey(o.User)})
	if err != nil {
		return drive.Outcome{Code: drive.CodeOf(err)}
	}
	now := time.Now().UTC()
	acct, ok, err := dynamo.DecodeAccount(res.Item)
	if err != nil {
		return drive.Outcome{Code: connect.CodeInternal.String()}
	}
	if !ok {
		acct = ledger.NewAccount(o.User)
		acct.CreateTime = now
	}
	if m.Spends() && acct.Balance.LessThan(m.Amount) {
		return drive.Outcome{Code: connect.CodeFailedPrecondition.String()}
	}
	e := ledger.Entry{ID: ulid.Make().String(), UserID: o.User, Version: acct.Version + 1, Type: m.Type, Amount: m.Delta(),
		BalanceAfter: acct.Balance.Add(m.Delta()), RequestID: m.RequestID, CreateTime: now}
	after := acct
	after.Balance, after.Version, after.UpdateTime = e.BalanceAfter, e.Version, now
	if _, err := x.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &x.table, Item: dynamo.EntryItem(e)}); err != nil {
		return drive.Outcome{Code: drive.CodeOf(err)}
	}
	if _, err := x.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &x.table, Item: dynamo.AccountItem(after)}); err != nil {
		return drive.Outcome{Code: drive.CodeOf(err)}
	}
	x.mu.Lock()
	if m.Spends() {
		x.spent[o.User] = x.spent[o.User].Add(m.Amount)
	} else {
		x.granted[o.User] = x.granted[o.User].Add(m.Amount)
	}
	x.mu.Unlock()
	return drive.Outcome{Code: "ok", EntryID: e.ID, Version: e.Version}
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
		res, err := x.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &x.table, ConsistentRead: aws.Bool(true), Key: dynamo.AccountKey(user)})
		if err != nil {
			return nil, err
		}
		acct, _, err := dynamo.DecodeAccount(res.Item)
		if err != nil {
			return nil, err
		}
		balance := acct.Balance
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
