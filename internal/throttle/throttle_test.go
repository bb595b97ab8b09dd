package throttle_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/pointledger/pointledger/internal/throttle"
)

func cancelled(codes ...string) error {
	reasons := make([]types.CancellationReason, len(codes))
	for i, c := range codes {
		reasons[i].Code = aws.String(c)
	}
	return fmt.Errorf("write: %w", &types.TransactionCanceledException{CancellationReasons: reasons})
}

func TestThrottled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		err              error
		refused, refusal bool
	}{
		{"throttling exception", &smithy.GenericAPIError{Code: "ThrottlingException"}, true, true},
		{"provisioned throughput", fmt.Errorf("x: %w", &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException"}), true, true},
		{"another API error", &smithy.GenericAPIError{Code: "ValidationException"}, false, false},
		{"a transaction with a throttled item", cancelled("None", "ThrottlingError"), false, true},
		{"a transaction over the account's limit", cancelled("RequestLimitExceeded"), false, true},
		{"a transaction that conflicted", cancelled("None", "TransactionConflict"), false, false},
		{"a condition that failed", cancelled("ConditionalCheckFailed"), false, false},
		{"no DynamoDB error", errors.New("connection reset"), false, false},
		{"nil", nil, false, false},
	} {
		if got := throttle.Refused(tc.err); got != tc.refused {
			t.Errorf("%s: Refused = %t, want %t", tc.name, got, tc.refused)
		}
		if got := throttle.Throttled(tc.err); got != tc.refusal {
			t.Errorf("%s: Throttled = %t, want %t", tc.name, got, tc.refusal)
		}
	}
}
