package dynamo

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func getS(item map[string]types.AttributeValue, name string) string {
	if s, ok := item[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, name string) int64 {
	if n, ok := item[name].(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	return 0
}
