package ddbattr_test

import (
	"fmt"
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

// DecimalString is decimal.String, on either side of an int64's bounds and
// with every exponent.
func TestDecimalStringIsDecimalString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"0", "1", "-1", "7", "99", "100", "12345678901234567", "-42", "10.50", "-0.000001", "1e3", "1.5e2", "0.0",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "123456789012345678901234567890",
	} {
		d := decimal.RequireFromString(s)
		if got, want := ddbattr.DecimalString(d), d.String(); got != want {
			t.Errorf("DecimalString(%s) = %q, want %q", s, got, want)
		}
	}
	for _, d := range []decimal.Decimal{decimal.Zero, decimal.New(5, 2), decimal.New(-5, -2), decimal.NewFromInt(1).Sub(decimal.NewFromInt(3))} {
		if got, want := ddbattr.DecimalString(d), d.String(); got != want {
			t.Errorf("DecimalString(%s) = %q, want %q", d, got, want)
		}
	}
}

// Values' values are the package's own, each its own attribute though
// they share blocks, past a block's end too.
func TestValuesAreTheSame(t *testing.T) {
	t.Parallel()
	for _, v := range []ddbattr.Values{{}, ddbattr.MakeValues(3, 2), ddbattr.MakeValues(0, 0)} {
		var got, want []types.AttributeValue
		for i := range 40 {
			got = append(got, v.S(fmt.Sprint("s", i)), v.Int(int64(i)), v.Decimal(decimal.New(int64(i), -1)))
			want = append(want, ddbattr.S(fmt.Sprint("s", i)), ddbattr.Int(int64(i)), ddbattr.Decimal(decimal.New(int64(i), -1)))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	}
}
