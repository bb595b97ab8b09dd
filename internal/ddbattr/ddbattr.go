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
	"math"
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
	return &types.AttributeValueMemberN{Value: DecimalString(v)}
}

var minInt64, maxInt64 = decimal.NewFromInt(math.MinInt64), decimal.NewFromInt(math.MaxInt64)

// DecimalString is v.String(): by strconv when v is an integer of
// exponent 0 that fits an int64 (every amount of a ledger whose points
// are whole), which math/big formats with two allocations and a division
// a digit.
func DecimalString(v decimal.Decimal) string {
	if v.Exponent() == 0 && v.Cmp(minInt64) >= 0 && v.Cmp(maxInt64) <= 0 {
		return strconv.FormatInt(v.CoefficientInt64(), 10)
	}
	return v.String()
}

// Values hands out attribute values from blocks allocated together, for
// the items of one request: a transaction's few dozen values in a few
// allocations instead of one each (issue 37). A value is the same as S's,
// Int's or Decimal's; it keeps its block alive as long as it is. The zero
// Values is ready; a Values is for one goroutine.
type Values struct {
	s []types.AttributeValueMemberS
	n []types.AttributeValueMemberN
}

// MakeValues is a Values whose first blocks hold strings string values and
// numbers number values: an item's, when its builder knows about how many.
func MakeValues(strings, numbers int) Values {
	return Values{s: make([]types.AttributeValueMemberS, 0, strings), n: make([]types.AttributeValueMemberN, 0, numbers)}
}

// valuesBlock is how many values of a type a block holds: about a
// purchase's transaction's strings.
const valuesBlock = 16

// S is a string attribute, as S.
func (a *Values) S(v string) types.AttributeValue {
	if len(a.s) == cap(a.s) {
		a.s = make([]types.AttributeValueMemberS, 0, valuesBlock)
	}
	a.s = append(a.s, types.AttributeValueMemberS{Value: v})
	return &a.s[len(a.s)-1]
}

// number is a number attribute of text v.
func (a *Values) number(v string) types.AttributeValue {
	if len(a.n) == cap(a.n) {
		a.n = make([]types.AttributeValueMemberN, 0, valuesBlock)
	}
	a.n = append(a.n, types.AttributeValueMemberN{Value: v})
	return &a.n[len(a.n)-1]
}

// Int is a number attribute of an integer, as Int.
func (a *Values) Int(v int64) types.AttributeValue { return a.number(strconv.FormatInt(v, 10)) }

// Decimal is a number attribute of a decimal, as Decimal.
func (a *Values) Decimal(v decimal.Decimal) types.AttributeValue { return a.number(DecimalString(v)) }

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
