package ddbattr_test

import (
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
)

func TestValuesAreWhatDynamoDBKeeps(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		got, want types.AttributeValue
	}{
		{"string", ddbattr.S("u1"), &types.AttributeValueMemberS{Value: "u1"}},
		{"empty string", ddbattr.S(""), &types.AttributeValueMemberS{Value: ""}},
		{"int", ddbattr.Int(-42), &types.AttributeValueMemberN{Value: "-42"}},
		{"decimal, as decimal.String writes it", ddbattr.Decimal(decimal.RequireFromString("10.50")), &types.AttributeValueMemberN{Value: "10.5"}},
		{"decimal", ddbattr.Decimal(decimal.RequireFromString("-0.000001")), &types.AttributeValueMemberN{Value: "-0.000001"}},
		{"bool", ddbattr.Bool(true), &types.AttributeValueMemberBOOL{Value: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
}

func TestTextReadsStringsAndNumbersOnly(t *testing.T) {
	t.Parallel()
	item := map[string]types.AttributeValue{
		"s": ddbattr.S("a#1"), "n": ddbattr.Int(7), "b": ddbattr.Bool(true),
	}
	for name, want := range map[string]string{"s": "a#1", "n": "7", "b": "", "absent": ""} {
		if got := ddbattr.Text(item, name); got != want {
			t.Errorf("Text(%s) = %q, want %q", name, got, want)
		}
	}
}
