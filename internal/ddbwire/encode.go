package ddbwire

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AppendTransactWriteItems appends in as DynamoDB's JSON 1.0 body of a
// TransactWriteItems request to b, by a switch over the SDK's types (no
// reflection, no intermediate document). The SDK serialises the same input
// to the same JSON value (TestEncodingMatchesSDK); keys may come in another
// order, which JSON does not distinguish.
func AppendTransactWriteItems(b []byte, in *dynamodb.TransactWriteItemsInput) ([]byte, error) {
	b = append(b, `{"TransactItems":[`...)
	for i, item := range in.TransactItems {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendTransactItem(b, item); err != nil {
			return b, fmt.Errorf("transact item %d: %w", i, err)
		}
	}
	b = append(b, ']')
	if in.ClientRequestToken != nil {
		b = appendKey(b, "ClientRequestToken")
		b = appendString(b, *in.ClientRequestToken)
	}
	if in.ReturnConsumedCapacity != "" {
		b = appendKey(b, "ReturnConsumedCapacity")
		b = appendString(b, string(in.ReturnConsumedCapacity))
	}
	if in.ReturnItemCollectionMetrics != "" {
		b = appendKey(b, "ReturnItemCollectionMetrics")
		b = appendString(b, string(in.ReturnItemCollectionMetrics))
	}
	return append(b, '}'), nil
}

// AppendGetItem appends in as the body of a GetItem request to b. An input
// with AttributesToGet or ReturnConsumedCapacity, which the store never
// sends, is refused (the caller sends it through the SDK).
func AppendGetItem(b []byte, in *dynamodb.GetItemInput) ([]byte, error) {
	if in.AttributesToGet != nil || in.ReturnConsumedCapacity != "" {
		return b, fmt.Errorf("GetItem with AttributesToGet or ReturnConsumedCapacity: %w", errUnsupported)
	}
	b = append(b, '{')
	start := len(b)
	b, err := appendOperationFields(b, operation{key: in.Key, table: in.TableName, names: in.ExpressionAttributeNames, projection: in.ProjectionExpression})
	if err != nil {
		return b, err
	}
	if in.ConsistentRead != nil {
		if len(b) > start {
			b = append(b, ',')
		}
		b = strconv.AppendBool(append(b, `"ConsistentRead":`...), *in.ConsistentRead)
	}
	return append(b, '}'), nil
}

// operation is what the four kinds of transact item share, in one shape.
type operation struct {
	item, key        map[string]types.AttributeValue
	table            *string
	update           *string
	projection       *string
	condition        *string
	names            map[string]string
	values           map[string]types.AttributeValue
	returnOnConflict types.ReturnValuesOnConditionCheckFailure
}

func appendTransactItem(b []byte, item types.TransactWriteItem) ([]byte, error) {
	b = append(b, '{')
	first := true
	next := func(name string, op operation) (err error) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, name)
		b = append(b, ':')
		b, err = appendOperation(b, op)
		return err
	}
	var err error
	if p := item.Put; p != nil && err == nil {
		err = next("Put", operation{item: p.Item, table: p.TableName, condition: p.ConditionExpression,
			names: p.ExpressionAttributeNames, values: p.ExpressionAttributeValues, returnOnConflict: p.ReturnValuesOnConditionCheckFailure})
	}
	if u := item.Update; u != nil && err == nil {
		err = next("Update", operation{key: u.Key, table: u.TableName, update: u.UpdateExpression, condition: u.ConditionExpression,
			names: u.ExpressionAttributeNames, values: u.ExpressionAttributeValues, returnOnConflict: u.ReturnValuesOnConditionCheckFailure})
	}
	if d := item.Delete; d != nil && err == nil {
		err = next("Delete", operation{key: d.Key, table: d.TableName, condition: d.ConditionExpression,
			names: d.ExpressionAttributeNames, values: d.ExpressionAttributeValues, returnOnConflict: d.ReturnValuesOnConditionCheckFailure})
	}
	if c := item.ConditionCheck; c != nil && err == nil {
		err = next("ConditionCheck", operation{key: c.Key, table: c.TableName, condition: c.ConditionExpression,
			names: c.ExpressionAttributeNames, values: c.ExpressionAttributeValues, returnOnConflict: c.ReturnValuesOnConditionCheckFailure})
	}
	return append(b, '}'), err
}

func appendOperation(b []byte, op operation) ([]byte, error) {
	b, err := appendOperationFields(append(b, '{'), op)
	return append(b, '}'), err
}

// appendOperationFields writes op's fields, without braces.
func appendOperationFields(b []byte, op operation) ([]byte, error) {
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, name)
		b = append(b, ':')
	}
	var err error
	if op.item != nil {
		field("Item")
		if b, err = appendAttributeMap(b, op.item); err != nil {
			return b, err
		}
	}
	if op.key != nil {
		field("Key")
		if b, err = appendAttributeMap(b, op.key); err != nil {
			return b, err
		}
	}
	for _, s := range [...]struct {
		name  string
		value *string
	}{{"TableName", op.table}, {"UpdateExpression", op.update}, {"ConditionExpression", op.condition}, {"ProjectionExpression", op.projection}} {
		if s.value != nil {
			field(s.name)
			b = appendString(b, *s.value)
		}
	}
	if op.names != nil {
		field("ExpressionAttributeNames")
		b = append(b, '{')
		i := 0
		for k, v := range op.names {
			if i++; i > 1 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, v)
		}
		b = append(b, '}')
	}
	if op.values != nil {
		field("ExpressionAttributeValues")
		if b, err = appendAttributeMap(b, op.values); err != nil {
			return b, err
		}
	}
	if op.returnOnConflict != "" {
		field("ReturnValuesOnConditionCheckFailure")
		b = appendString(b, string(op.returnOnConflict))
	}
	return b, nil
}

func appendAttributeMap(b []byte, m map[string]types.AttributeValue) ([]byte, error) {
	b = append(b, '{')
	i := 0
	for k, v := range m {
		if i++; i > 1 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = appendAttributeValue(b, v); err != nil {
			return b, fmt.Errorf("attribute %q: %w", k, err)
		}
	}
	return append(b, '}'), nil
}

// appendAttributeValue writes one value as DynamoDB's JSON names it:
// {"S":"x"}, {"N":"1"}, {"B":"<base64>"}, {"BOOL":true}, {"NULL":true},
// {"M":{...}}, {"L":[...]}, {"SS":[...]}, {"NS":[...]}, {"BS":[...]}.
func appendAttributeValue(b []byte, v types.AttributeValue) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		b = appendString(append(b, `{"S":`...), v.Value)
	case *types.AttributeValueMemberN:
		b = appendString(append(b, `{"N":`...), v.Value)
	case *types.AttributeValueMemberB:
		b = appendBytes(append(b, `{"B":`...), v.Value)
	case *types.AttributeValueMemberBOOL:
		b = strconv.AppendBool(append(b, `{"BOOL":`...), v.Value)
	case *types.AttributeValueMemberNULL:
		b = strconv.AppendBool(append(b, `{"NULL":`...), v.Value)
	case *types.AttributeValueMemberM:
		b, err = appendAttributeMap(append(b, `{"M":`...), v.Value)
	case *types.AttributeValueMemberL:
		b = append(b, `{"L":[`...)
		for i, e := range v.Value {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendAttributeValue(b, e); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	case *types.AttributeValueMemberSS:
		b = appendStrings(append(b, `{"SS":`...), v.Value)
	case *types.AttributeValueMemberNS:
		b = appendStrings(append(b, `{"NS":`...), v.Value)
	case *types.AttributeValueMemberBS:
		b = append(b, `{"BS":[`...)
		for i, e := range v.Value {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendBytes(b, e)
		}
		b = append(b, ']')
	default:
		// A kind this encoder does not know (a newer SDK's): the caller
		// sends the request through the SDK instead.
		return b, fmt.Errorf("attribute value of type %T: %w", v, errUnsupported)
	}
	return append(b, '}'), err
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

func appendBytes(b []byte, v []byte) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

func appendKey(b []byte, name string) []byte {
	b = append(b, ',')
	b = appendString(b, name)
	return append(b, ':')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 as U+FFFD (as encoding/json does).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none of them needs a look (most
		// of a request's text: names, ids, times; issue 37).
		for i+8 <= len(s) && plain8(s[i:i+8]) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plain8 says whether none of s's eight bytes is a control character, a
// quote, a backslash or past ASCII: what appendString copies as it is. The
// tests of a zero byte and of a byte below 0x20 in a word are exact (Sean
// Anderson's bit hacks, "haszero" and "hasless").
func plain8(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	zero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	below := (x - ones*0x20) & ^x & highs
	return (below | zero(x^(ones*'"')) | zero(x^(ones*'\\')) | x&highs) == 0
}
