// Package throttle tells a DynamoDB request refused for capacity from other
// failures, for the write path (internal/ledger/dynamo) and the dispatcher
// (internal/dispatch), which both back off and try again. A refused request
// was not carried out.
package throttle

import (
	"errors"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Refused says whether err is DynamoDB refusing a request for capacity,
// after the SDK's own retries: a ThrottlingException or its kin.
func Refused(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded":
		return true
	}
	return false
}

// Reason says whether a transaction's cancellation reason code is an item
// refused for capacity.
func Reason(code string) bool {
	switch code {
	case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
		return true
	}
	return false
}

// Throttled is Refused, or a transaction (TransactWriteItems,
// TransactGetItems) cancelled with a reason that Reason names.
func Throttled(err error) bool {
	var cancelled *types.TransactionCanceledException
	return Refused(err) || errors.As(err, &cancelled) && slices.ContainsFunc(cancelled.CancellationReasons, func(r types.CancellationReason) bool {
		return Reason(aws.ToString(r.Code))
	})
}
