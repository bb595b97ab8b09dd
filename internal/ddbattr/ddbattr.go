// Package ddbattr writes and reads DynamoDB attribute values, once for
// every package that keeps items in DynamoDB (the ledger's store, the
// projection, the lease table, the notices; the dispatcher after its
// split), instead of a copy of the same few helpers in each.
//
// Numbers are written as DynamoDB keeps them, in decimal text; Text reads
// a string or a number attribute as its text, and an attribute that is
// absent, or of another type, as "", so that the caller's parse says what
// is wrong with it.
package ddbattr

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
)

// S is a string attribute.
func S(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// Int is a number attribute of an integer.
func Int(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// Decimal is a number attribute of a decimal, exactly as it is.
func Decimal(v decimal.Decimal) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: v.String()}
}

// Bool is a boolean attribute.
func Bool(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

// Text is the text of item's attribute name when it is a string or a
// number; "" when it is absent or of another type.
func Text(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

// IntOf is item's attribute name as an integer (a number, or a string of
// digits); 0 when it is absent, of another type or not an integer.
func IntOf(item map[string]types.AttributeValue, name string) int64 {
	v, _ := strconv.ParseInt(Text(item, name), 10, 64)
	return v
}
