package ddbwire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// TestGetItemMatchesSDK: an item with an attribute of every kind, written
// to DynamoDB Local, reads back through ddbwire as it does through the SDK
// client (whole, projected, and an item that is not there); a missing
// table is the SDK's error; and the request is the SDK's JSON.
func TestGetItemMatchesSDK(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	ctx := context.Background()
	db := env.Client
	wire, err := ddbwire.New(ctx, db, ddbwire.Options{HTTPClient: ddbhttp.Unwrap(db.Options().HTTPClient)})
	if err != nil {
		t.Fatal(err)
	}
	own := ownConns(t, db, ddbhttp.Unwrap(db.Options().HTTPClient))
	key := map[string]types.AttributeValue{"PK": str("U#kinds"), "SK": str("ACCOUNT")}
	item := map[string]types.AttributeValue{"PK": key["PK"], "SK": key["SK"]}
	for i, k := range attributeKinds {
		item[fmt.Sprint("a", i)] = k.value
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(env.Ledger), Item: item}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   *dynamodb.GetItemInput
	}{
		{"every kind", &dynamodb.GetItemInput{TableName: aws.String(env.Ledger), Key: key, ConsistentRead: aws.Bool(true)}},
		{"projected", &dynamodb.GetItemInput{TableName: aws.String(env.Ledger), Key: key, ProjectionExpression: aws.String("#a, a3, a10"), ExpressionAttributeNames: map[string]string{"#a": "a1"}}},
		{"no such item", &dynamodb.GetItemInput{TableName: aws.String(env.Ledger), Key: map[string]types.AttributeValue{"PK": str("U#none"), "SK": str("ACCOUNT")}, ConsistentRead: aws.Bool(true)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := db.GetItem(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []*ddbwire.Client{wire, own} {
				got, err := w.GetItem(ctx, tc.in)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Item, want.Item) {
					t.Errorf("ddbwire (own connections %v) read %v, the SDK %v", w.OwnConns(), got.Item, want.Item)
				}
			}
		})
	}
	if got := len(cases[0].in.Key); got != 2 {
		t.Fatal("the key changed")
	}
	missing := &dynamodb.GetItemInput{TableName: aws.String(env.Prefix + "nosuchtable"), Key: key}
	_, want := db.GetItem(ctx, missing)
	_, got := wire.GetItem(ctx, missing)
	sameErrorOf(t, "GetItem", got, want)
	_, got = own.GetItem(ctx, missing)
	sameErrorOf(t, "GetItem", got, want)

	rec := &recorder{answer: "{}"}
	sdk := sdkClient("http://127.0.0.1:1", rec, credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
	for _, tc := range cases {
		if _, err := sdk.GetItem(ctx, tc.in); err != nil {
			t.Fatal(err)
		}
		_, sdkBody := rec.last(t)
		body, err := ddbwire.AppendGetItem(nil, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(jsonValue(t, body), jsonValue(t, sdkBody)) {
			t.Errorf("%s: ddbwire's request %s, the SDK's %s", tc.name, body, sdkBody)
		}
	}
}

// DecodeItem reads escapes as encoding/json does, skips fields it does not
// need, and refuses what is not an answer.
func TestDecodeItem(t *testing.T) {
	t.Parallel()
	got, err := ddbwire.DecodeItem([]byte(` { "ConsumedCapacity": {"CapacityUnits": 1.5e0, "TableName": "t", "x": [null, true, -2]},
		"Item": {"s": {"S": "caf\u00e9 \ud83d\ude00 \/ \"q\" \\ \n"}, "n": {"N": "1"}} } `))
	if err != nil {
		t.Fatal(err)
	}
	var want string
	if err := json.Unmarshal([]byte(`"caf\u00e9 \ud83d\ude00 \/ \"q\" \\ \n"`), &want); err != nil {
		t.Fatal(err)
	}
	if s, ok := got["s"].(*types.AttributeValueMemberS); !ok || s.Value != want || len(got) != 2 {
		t.Errorf("read %#v, want S %q", got, want)
	}
	for _, bad := range []string{``, `{`, `{"Item":{"a":{"S":"x"}}`, `{"Item":{"a":{"S":1}}}`, `{"Item":{"a":{}}}`,
		`{"Item":{"a":{"S":"x","N":"1"}}}`, `{"Item":{"a":{"X":"x"}}}`, `{"Item":{"a":{"B":"!!"}}}`, `{} {}`, `{"Item":{"a":{"S":"x` + "\x01" + `"}}}`} {
		if item, err := ddbwire.DecodeItem([]byte(bad)); err == nil {
			t.Errorf("%q read as %v", bad, item)
		}
	}
}
