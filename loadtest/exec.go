package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// requestTimeout bounds every request: one that takes longer counts as
// deadline_exceeded, an unknown outcome.
const requestTimeout = 30 * time.Second

// connectExec sends ops to ledgerd.
type connectExec struct {
	c pointledgerv1connect.LedgerServiceClient

	mu   sync.Mutex
	last *pb.Entry // the last acknowledged purchase or capture, to time the projection
}

// spent remembers e, an acknowledged purchase or capture, if it is the
// last so far.
func (x *connectExec) spent(e *pb.Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.last == nil || e.CreateTime.AsTime().After(x.last.CreateTime.AsTime()) {
		x.last = e
	}
}

func (x *connectExec) do(ctx context.Context, o op) outcome {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var e *pb.Entry
	var h *pb.Hold // an Authorize is answered with its hold, not an entry
	var err error
	replayed := false
	switch o.kind {
	case "grant":
		var res *connect.Response[pb.GrantResponse]
		req := &pb.GrantRequest{UserId: o.user, Amount: o.amount.String(), RequestId: o.requestID}
		if o.ttl > 0 {
			req.Ttl = durationpb.New(o.ttl)
		}
		if res, err = x.c.Grant(ctx, connect.NewRequest(req)); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "purchase":
		var res *connect.Response[pb.PurchaseResponse]
		if res, err = x.c.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: o.user, Amount: o.amount.String(), RequestId: o.requestID})); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "refund":
		var res *connect.Response[pb.RefundResponse]
		if res, err = x.c.Refund(ctx, connect.NewRequest(&pb.RefundRequest{UserId: o.user, Amount: o.amount.String(), RequestId: o.requestID, PurchaseRequestId: o.purchase})); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "authorize":
		var res *connect.Response[pb.AuthorizeResponse]
		req := &pb.AuthorizeRequest{UserId: o.user, Amount: o.amount.String(), RequestId: o.requestID, OrderId: "order-" + o.requestID}
		if o.ttl > 0 {
			req.Ttl = durationpb.New(o.ttl)
		}
		if res, err = x.c.Authorize(ctx, connect.NewRequest(req)); err == nil {
			h, replayed = res.Msg.Hold, res.Msg.Replayed
		}
	case "capture":
		var res *connect.Response[pb.CaptureResponse]
		req := &pb.CaptureRequest{UserId: o.user, HoldRequestId: o.hold, Amount: o.amount.String(), RequestId: o.requestID}
		if o.whole {
			req.Amount = ""
		}
		if res, err = x.c.Capture(ctx, connect.NewRequest(req)); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "void":
		var res *connect.Response[pb.VoidResponse]
		if res, err = x.c.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: o.user, HoldRequestId: o.hold, RequestId: o.requestID})); err == nil {
			e, replayed = res.Msg.Entry, res.Msg.Replayed
		}
	case "balance":
		_, err = x.c.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: o.user}))
	case "history":
		_, err = x.c.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: o.user, PageSize: 20}))
	default:
		err = connect.NewError(connect.CodeUnimplemented, fmt.Errorf("op %q", o.kind))
	}
	if err != nil {
		return outcome{code: codeOf(err), unreachable: unreachable(err), err: err.Error()}
	}
	out := outcome{code: "ok", replayed: replayed}
	if e != nil {
		out.entryID, out.version = e.EntryId, e.Version
		if o.kind == "purchase" || o.kind == "capture" {
			x.spent(e)
		}
	}
	if h != nil {
		out.expire = h.ExpireTime.AsTime()
	}
	return out
}

func codeOf(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded.String()
	}
	return connect.CodeOf(err).String()
}

// unreachable says whether a call's error is its connection's: refused (no
// process listens), reset or closed before the answer (the process died),
// rather than an answer.
func unreachable(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// directExec is baseline (a): the load tool sends the write path's own
// transaction (dynamo.SingleTransaction: account update, entry, request
// record, same conditions) straight to DynamoDB. It keeps each user's
// aggregate in memory and sends one transaction per user at a time, so it
// never reads and never loses a race: the ceiling for ledgerd.
type directExec struct {
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

func newDirectExec(db *dynamodb.Client, table string) *directExec {
	return &directExec{db: db, table: table, read: dynamo.New(db, dynamo.Options{Table: table}), accts: map[string]*directAccount{}}
}

func (x *directExec) account(user string) *directAccount {
	x.mu.Lock()
	defer x.mu.Unlock()
	a, ok := x.accts[user]
	if !ok {
		a = &directAccount{acct: ledger.Account{UserID: user}}
		x.accts[user] = a
	}
	return a
}

func (x *directExec) do(ctx context.Context, o op) outcome {
	m, code := baselineMutation(o)
	if code != "" {
		return outcome{code: code}
	}
	a := x.account(o.user)
	a.mu.Lock()
	defer a.mu.Unlock()
	if m.Spends() && a.acct.Balance.LessThan(m.Amount) {
		return outcome{code: connect.CodeFailedPrecondition.String()}
	}
	now := time.Now()
	in, e, after := dynamo.SingleTransaction(x.table, a.acct, m, ulid.Make().String(), now)
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if _, err := x.db.TransactWriteItems(ctx, in); err != nil {
		// Not expected (ids are fresh, one transaction per user at a
		// time): reload the aggregate and report the failure.
		if acct, rerr := x.read.Balance(ctx, o.user); rerr == nil {
			a.acct = acct
		}
		if ctx.Err() != nil {
			return outcome{code: codeOf(ctx.Err())} // a timeout, as ledgerd's would be counted
		}
		return outcome{code: connect.CodeAborted.String()}
	}
	a.acct = after
	return outcome{code: "ok", entryID: e.ID, version: e.Version}
}

// baselineMutation validates a baseline's op; baselines do grants and
// purchases only.
func baselineMutation(o op) (ledger.Mutation, string) {
	t := ledger.EntryPurchase
	switch o.kind {
	case "purchase":
	case "grant":
		t = ledger.EntryGrant
	default:
		return ledger.Mutation{}, connect.CodeUnimplemented.String()
	}
	m, err := ledger.NewMutation(t, ledger.Request{UserID: o.user, RequestID: o.requestID, Amount: o.amount.String()}, ledger.DefaultScale)
	if err != nil {
		return ledger.Mutation{}, connect.CodeInvalidArgument.String()
	}
	return m, ""
}

// naiveExec is baseline (b): how a ledger goes wrong. It reads the balance,
// and if it covers the purchase, writes the entry and the new balance in two
// unconditional writes. Concurrent purchases of one user read the same
// balance: both succeed (an overdraft when it covered one), and the second
// write of the balance undoes the first (a lost update).
type naiveExec struct {
	db    *dynamodb.Client
	table string

	mu      sync.Mutex
	granted map[string]decimal.Decimal // acknowledged, by user
	spent   map[string]decimal.Decimal
}

func newNaiveExec(db *dynamodb.Client, table string) *naiveExec {
	return &naiveExec{db: db, table: table, granted: map[string]decimal.Decimal{}, spent: map[string]decimal.Decimal{}}
}

func (x *naiveExec) do(ctx context.Context, o op) outcome {
	m, code := baselineMutation(o)
	if code != "" {
		return outcome{code: code}
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	pk := &types.AttributeValueMemberS{Value: dynamo.PartitionKey(o.user)}
	res, err := x.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &x.table,
		Key: map[string]types.AttributeValue{"PK": pk, "SK": &types.AttributeValueMemberS{Value: "A"}}})
	if err != nil {
		return outcome{code: codeOf(err)}
	}
	balance, version := decimal.Zero, int64(0)
	if b, ok := res.Item["balance"].(*types.AttributeValueMemberN); ok {
		balance, _ = decimal.NewFromString(b.Value)
	}
	if v, ok := res.Item["version"].(*types.AttributeValueMemberN); ok {
		version, _ = strconv.ParseInt(v.Value, 10, 64) // DynamoDB wrote it: an integer
	}
	if m.Spends() && balance.LessThan(m.Amount) {
		return outcome{code: connect.CodeFailedPrecondition.String()}
	}
	balance, version = balance.Add(m.Delta()), version+1
	n := func(d fmt.Stringer) types.AttributeValue { return &types.AttributeValueMemberN{Value: d.String()} }
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	if _, err := x.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &x.table, Item: map[string]types.AttributeValue{
		"PK": pk, "SK": s(fmt.Sprintf("E#%020d", version)), "type": s(string(m.Type)), "amount": n(m.Delta()),
		"balance_after": n(balance), "request_id": s(m.RequestID),
	}}); err != nil {
		return outcome{code: codeOf(err)}
	}
	if _, err := x.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &x.table, Item: map[string]types.AttributeValue{
		"PK": pk, "SK": s("A"), "balance": n(balance), "version": n(decimal.NewFromInt(version)),
	}}); err != nil {
		return outcome{code: codeOf(err)}
	}
	x.mu.Lock()
	if m.Spends() {
		x.spent[o.user] = x.spent[o.user].Add(m.Amount)
	} else {
		x.granted[o.user] = x.granted[o.user].Add(m.Amount)
	}
	x.mu.Unlock()
	return outcome{code: "ok", version: version}
}

// damage reads every user's final balance and says what the naive writes
// did: purchases acknowledged beyond what the user was granted
// (overdrafts), and acknowledged purchases the balance does not show (lost
// updates).
func (x *naiveExec) damage(ctx context.Context, amount decimal.Decimal) ([]string, error) {
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
