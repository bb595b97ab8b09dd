package ddbwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbwire"
)

// attributeKinds is a value of every kind of AttributeValue, with the
// strings JSON must escape.
var attributeKinds = []struct {
	name  string
	value types.AttributeValue
}{
	{"S", &types.AttributeValueMemberS{Value: "user-1"}},
	{"S escaped", &types.AttributeValueMemberS{Value: "quote \" backslash \\ newline \n tab \t control \x01 \x1f del \x7f"}},
	{"S unicode", &types.AttributeValueMemberS{Value: "grüße € 😀 \u2028 <&>"}},
	{"S empty", &types.AttributeValueMemberS{Value: ""}},
	{"N", &types.AttributeValueMemberN{Value: "-12.5E3"}},
	{"B", &types.AttributeValueMemberB{Value: []byte{0, 1, 2, 0xfe, 0xff}}},
	{"B empty", &types.AttributeValueMemberB{Value: []byte{}}},
	{"BOOL true", &types.AttributeValueMemberBOOL{Value: true}},
	{"BOOL false", &types.AttributeValueMemberBOOL{Value: false}},
	{"NULL", &types.AttributeValueMemberNULL{Value: true}},
	{"M", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"a": &types.AttributeValueMemberN{Value: "1"},
		"b": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"c": &types.AttributeValueMemberS{Value: "d"}}},
	}}},
	{"M empty", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}},
	{"L", &types.AttributeValueMemberL{Value: []types.AttributeValue{
		&types.AttributeValueMemberS{Value: "x"}, &types.AttributeValueMemberN{Value: "2"},
		&types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberBOOL{Value: true}}},
	}}},
	{"L empty", &types.AttributeValueMemberL{Value: []types.AttributeValue{}}},
	{"SS", &types.AttributeValueMemberSS{Value: []string{"a", "b\"c"}}},
	{"NS", &types.AttributeValueMemberNS{Value: []string{"1", "2.5", "-3"}}},
	{"BS", &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}}},
}

// transactionOf puts v in each of a transaction's four kinds of item, as
// an item's attribute, a key's and an expression's value.
func transactionOf(v types.AttributeValue) *dynamodb.TransactWriteItemsInput {
	table := aws.String("t1_ledger")
	key := map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "U#1"}, "SK": &types.AttributeValueMemberS{Value: "ACCOUNT"}}
	names := map[string]string{"#v": "v", "#w": "weird \"name\""}
	values := map[string]types.AttributeValue{":v": v, ":one": &types.AttributeValueMemberN{Value: "1"}}
	return &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: table, Item: map[string]types.AttributeValue{"PK": key["PK"], "SK": &types.AttributeValueMemberS{Value: "E#1"}, "v": v},
				ConditionExpression: aws.String("attribute_not_exists(PK)"), ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
			{Update: &types.Update{TableName: table, Key: key, UpdateExpression: aws.String("SET #v = :v ADD n :one"),
				ConditionExpression: aws.String("#w <> :v"), ExpressionAttributeNames: names, ExpressionAttributeValues: values,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
			{Delete: &types.Delete{TableName: table, Key: map[string]types.AttributeValue{"PK": key["PK"], "SK": &types.AttributeValueMemberS{Value: "OLD"}},
				ConditionExpression: aws.String("#v = :v"), ExpressionAttributeNames: map[string]string{"#v": "v"}, ExpressionAttributeValues: map[string]types.AttributeValue{":v": v}}},
			{ConditionCheck: &types.ConditionCheck{TableName: table, Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "B#1"}, "SK": &types.AttributeValueMemberS{Value: "BUDGET"}},
				ConditionExpression: aws.String("attribute_exists(PK)")}},
		},
		ClientRequestToken: aws.String("01JZ-token"),
	}
}

// TestEncodingMatchesSDK: for a value of every AttributeValue kind in every
// kind of transact item, ddbwire's body is the same JSON value as the
// body the SDK client sends for the same input (captured from its HTTP
// client), and is sent with the same target and content type.
func TestEncodingMatchesSDK(t *testing.T) {
	t.Parallel()
	for _, tc := range attributeKinds {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := transactionOf(tc.value)
			rec := &recorder{answer: "{}"}
			db := sdkClient("http://127.0.0.1:1", rec, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
			if _, err := db.TransactWriteItems(context.Background(), in); err != nil {
				t.Fatalf("SDK: %v", err)
			}
			sdkReq, sdkBody := rec.last(t)

			lean, err := ddbwire.AppendTransactWriteItems(nil, in)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := jsonValue(t, lean), jsonValue(t, sdkBody); !reflect.DeepEqual(got, want) {
				t.Errorf("ddbwire's body\n%s\nis not the SDK's\n%s", lean, sdkBody)
			}

			wire := leanClient(t, rec, "http://127.0.0.1:1")
			if _, err := wire.TransactWriteItems(context.Background(), in); err != nil {
				t.Fatalf("ddbwire: %v", err)
			}
			req, body := rec.last(t)
			if got, want := jsonValue(t, body), jsonValue(t, sdkBody); !reflect.DeepEqual(got, want) {
				t.Errorf("sent body %s, the SDK's %s", body, sdkBody)
			}
			for _, h := range []string{"Content-Type", "X-Amz-Target"} {
				if req.Header.Get(h) != sdkReq.Header.Get(h) {
					t.Errorf("%s %q, the SDK's %q", h, req.Header.Get(h), sdkReq.Header.Get(h))
				}
			}
		})
	}
}

// An attribute value of a kind the encoder does not know is an error (the
// client then sends the call through the SDK), not a wrong body.
func TestEncodingRefusesUnknownKinds(t *testing.T) {
	t.Parallel()
	in := transactionOf(&types.UnknownUnionMember{Tag: "X"})
	if _, err := ddbwire.AppendTransactWriteItems(nil, in); err == nil {
		t.Error("an unknown attribute value kind was encoded")
	}
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// leanClient is ddbwire over an SDK client for endpoint, both sending
// through doer.
func leanClient(t *testing.T, doer ddbwire.Doer, endpoint string) *ddbwire.Client {
	t.Helper()
	db := sdkClient(endpoint, doer, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
	c, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: doer})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
