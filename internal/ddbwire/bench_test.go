package ddbwire_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// stub answers every request with a success, reading its body: what a
// call costs the client alone, no network and no DynamoDB.
type stub struct{}

func (stub) Do(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), ContentLength: 2, Request: req}, nil
}

// purchaseLike is a transaction the size of a purchase's: the account's
// update and the entry's put.
func purchaseLike() *dynamodb.TransactWriteItemsInput {
	table := aws.String("t1_ledger")
	n := func(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
	return &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{TableName: table, Key: map[string]types.AttributeValue{"PK": str("U#user-0042"), "SK": str("ACCOUNT")},
				UpdateExpression:    aws.String("SET #v = :v, balance = :b, buckets = :k"),
				ConditionExpression: aws.String("#v = :old"), ExpressionAttributeNames: map[string]string{"#v": "version"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":v": n("42"), ":old": n("41"), ":b": n("958"),
					":k": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"2027-01-01T00:00:00Z": n("958")}}}}},
			{Put: &types.Put{TableName: table, Item: map[string]types.AttributeValue{
				"PK": str("U#user-0042"), "SK": str("E#00000000000000000042"), "type": str("PURCHASE"), "amount": n("1"),
				"request_id": str("p-12345"), "order_id": str("o"), "created_at": str("2026-11-28T02:00:00.123456Z"),
				"draws": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"expires_at": str("2027-01-01T00:00:00Z"), "amount": n("1")}}}},
			}, ConditionExpression: aws.String("attribute_not_exists(PK)"), ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
			{Put: &types.Put{TableName: table, Item: map[string]types.AttributeValue{"PK": str("U#user-0042"), "SK": str("R#p-12345"), "entry": n("42")},
				ConditionExpression: aws.String("attribute_not_exists(PK)"), ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
		},
		ClientRequestToken: aws.String("01JZ0000000000000000000000"),
	}
}

// BenchmarkTransactWriteItems is one purchase-sized TransactWriteItems
// through the SDK client and through ddbwire, to a stub HTTP client: the
// clients' own cost per call. Run:
//
//	go test -run '^$' -bench TransactWriteItems -benchmem ./internal/ddbwire/
func BenchmarkTransactWriteItems(b *testing.B) {
	in := purchaseLike()
	db := sdkClient("http://127.0.0.1:1", stub{}, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
	wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: stub{}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	}{{"sdk", db.TransactWriteItems}, {"ddbwire", wire.TransactWriteItems}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.call(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// account is a GetItem answer the size of an account's.
const account = `{"Item":{"PK":{"S":"U#user-0042"},"SK":{"S":"ACCOUNT"},"version":{"N":"42"},"balance":{"N":"958"},` +
	`"buckets":{"M":{"2027-01-01T00:00:00Z":{"N":"958"}}},"holds":{"L":[]},"next_expiry":{"S":"2027-01-01T00:00:00Z"}}}`

type itemStub struct{}

func (itemStub) Do(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(account)), ContentLength: int64(len(account)), Request: req}, nil
}

// BenchmarkGetItem is the write path's account read (a consistent GetItem
// of an account-sized item) through the SDK client and through ddbwire,
// to a stub HTTP client. Run:
//
//	go test -run '^$' -bench GetItem -benchmem ./internal/ddbwire/
func BenchmarkGetItem(b *testing.B) {
	in := &dynamodb.GetItemInput{TableName: aws.String("t1_ledger"), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": str("U#user-0042"), "SK": str("ACCOUNT")}}
	db := sdkClient("http://127.0.0.1:1", itemStub{}, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
	wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: itemStub{}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	}{{"sdk", db.GetItem}, {"ddbwire", wire.GetItem}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.call(context.Background(), in)
				if err != nil || len(out.Item) != 7 {
					b.Fatal(out, err)
				}
			}
		})
	}
}

// BenchmarkTransactWriteItemsOverTCP is the same call to a server on
// 127.0.0.1 that answers every request with a success at once (a fake:
// what the client costs with its connections, not DynamoDB's work): the
// SDK client, ddbwire through ddbhttp's client (net/http's Transport), and
// ddbwire on its own connections. The server's work is counted too (one
// process; cpu-ns/op is the process's CPU a call, the server's included);
// the difference between the last two is the Transport's. Run:
//
//	go test -run '^$' -bench TransactWriteItemsOverTCP -benchmem ./internal/ddbwire/
func BenchmarkTransactWriteItemsOverTCP(b *testing.B) {
	s := newRawServer(b, func(conn, req int, r *http.Request, w *bufio.Writer) bool {
		okAnswer(w, "{}")
		return false
	})
	in := purchaseLike()
	client := ddbhttp.Client()
	db := sdkClient(s.url(), client, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
	viaHTTP, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: client})
	if err != nil {
		b.Fatal(err)
	}
	own, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: client, OwnConns: true})
	if err != nil || !own.OwnConns() {
		b.Fatal(err)
	}
	b.Cleanup(own.CloseIdleConnections)
	for _, c := range []struct {
		name string
		call func(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	}{{"sdk", db.TransactWriteItems}, {"ddbwire-nethttp", viaHTTP.TransactWriteItems}, {"ddbwire-own", own.TransactWriteItems}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // as the write path's: one that can end
			defer cancel()
			reportCPU := dynamotest.CPU(b)
			for b.Loop() {
				if _, err := c.call(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU()
		})
	}
}
