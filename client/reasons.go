package client

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo that ledgerd puts
// on every error it sends.
const ErrorDomain = "pointledger.v1"

// A Reason says why ledgerd refused a call: the reason of its error's
// google.rpc.ErrorInfo. Reasons are stable; programs branch on them, never
// on messages. The code (connect.CodeOf) says what kind of refusal it is.
type Reason string

// The reasons ledgerd sends (a test checks this list against the server's).
const (
	// invalid_argument: the request is malformed; nothing was written.
	ReasonInvalidAmount     Reason = "INVALID_AMOUNT"
	ReasonInvalidUserID     Reason = "INVALID_USER_ID"
	ReasonInvalidRequestID  Reason = "INVALID_REQUEST_ID"
	ReasonInvalidOrderID    Reason = "INVALID_ORDER_ID"
	ReasonInvalidMetadata   Reason = "INVALID_METADATA"
	ReasonInvalidPageSize   Reason = "INVALID_PAGE_SIZE"
	ReasonInvalidPageToken  Reason = "INVALID_PAGE_TOKEN"
	ReasonInvalidFilter     Reason = "INVALID_FILTER"
	ReasonInvalidAdjustment Reason = "INVALID_ADJUSTMENT"
	ReasonInvalidStatus     Reason = "INVALID_STATUS"
	ReasonInvalidExpiry     Reason = "INVALID_EXPIRY"
	ReasonInvalidHold       Reason = "INVALID_HOLD"
	ReasonInvalidMinVersion Reason = "INVALID_MIN_VERSION"
	// WebhookService: an endpoint's event types, its URL (https, and no
	// loopback, private or link-local address, unless the server allows
	// them), its id, its description.
	ReasonInvalidEventType      Reason = "INVALID_EVENT_TYPE"
	ReasonEndpointURLNotAllowed Reason = "ENDPOINT_URL_NOT_ALLOWED"
	ReasonInvalidEndpointID     Reason = "INVALID_ENDPOINT_ID"
	ReasonInvalidDescription    Reason = "INVALID_DESCRIPTION"
	// Pending grants: an effective time in the past or too far ahead; a
	// reversal's reason unprintable or too long.
	ReasonInvalidEffectiveTime Reason = "INVALID_EFFECTIVE_TIME"
	ReasonInvalidReason        Reason = "INVALID_REASON"
	// invalid_argument before any method: the body is not a request (broken
	// JSON, an unknown field, a value of the wrong type, bytes that are not
	// protobuf), the content type is none ledgerd reads (HTTP 415), or the
	// HTTP method is not POST (or GET, for a read; HTTP 405).
	ReasonMalformedRequest     Reason = "MALFORMED_REQUEST"
	ReasonUnsupportedMediaType Reason = "UNSUPPORTED_MEDIA_TYPE"
	ReasonMethodNotAllowed     Reason = "METHOD_NOT_ALLOWED"

	// failed_precondition and not_found: refusals, final for their
	// request_id (sent again, they come back replayed: IsReplayed).
	ReasonInsufficientBalance   Reason = "INSUFFICIENT_BALANCE"
	ReasonAccountFrozen         Reason = "ACCOUNT_FROZEN"
	ReasonRefundExceedsPurchase Reason = "REFUND_EXCEEDS_PURCHASE"
	ReasonPurchaseNotFound      Reason = "PURCHASE_NOT_FOUND"
	ReasonAccountNotFound       Reason = "ACCOUNT_NOT_FOUND"
	ReasonBalanceLimit          Reason = "BALANCE_LIMIT"
	ReasonTooManyBuckets        Reason = "TOO_MANY_BUCKETS"
	ReasonHoldNotFound          Reason = "HOLD_NOT_FOUND"
	ReasonHoldNotHeld           Reason = "HOLD_NOT_HELD"
	ReasonHoldExpired           Reason = "HOLD_EXPIRED"
	ReasonCaptureExceedsHold    Reason = "CAPTURE_EXCEEDS_HOLD"
	ReasonTooManyHolds          Reason = "TOO_MANY_HOLDS"
	ReasonTooManyPending        Reason = "TOO_MANY_PENDING"
	ReasonGrantNotFound         Reason = "GRANT_NOT_FOUND"
	ReasonReversalExceedsGrant  Reason = "REVERSAL_EXCEEDS_GRANT"
	// ListHistory's min_version beyond the ledger's version (a read: not
	// recorded).
	ReasonMinVersionAheadOfLedger Reason = "MIN_VERSION_AHEAD_OF_LEDGER"
	// WebhookService: no endpoint has the id given (not recorded).
	ReasonEndpointNotFound Reason = "ENDPOINT_NOT_FOUND"
	// AdminService: an explaining Adjust, a second Reconcile.
	ReasonBalanceMoved          Reason = "BALANCE_MOVED"
	ReasonNothingToExplain      Reason = "NOTHING_TO_EXPLAIN"
	ReasonNotTheDifference      Reason = "NOT_THE_DIFFERENCE"
	ReasonReconciliationRunning Reason = "RECONCILIATION_RUNNING"

	// already_exists: the request_id was used for another request.
	ReasonRequestIDReused Reason = "REQUEST_ID_REUSED"

	// aborted, unavailable, internal: nothing was decided; the same request
	// may be sent again (Retry does).
	ReasonTooManyConflicts Reason = "TOO_MANY_CONFLICTS"
	ReasonThrottled        Reason = "THROTTLED"
	// ListHistory's min_version not reached by the history within the wait.
	ReasonHistoryBehind Reason = "HISTORY_BEHIND"
	ReasonInternal      Reason = "INTERNAL"

	// unimplemented: the path names no method of the services; or the
	// server is built without what the method needs (ListWebhookDeliveries
	// and RedeliverWebhookEvents from a server without the webhooks
	// table's deliveries; ledgerd serve always has them).
	ReasonUnknownProcedure Reason = "UNKNOWN_PROCEDURE"
	ReasonNotConfigured    Reason = "NOT_CONFIGURED"

	// unauthenticated, permission_denied, resource_exhausted: the token.
	ReasonMissingToken   Reason = "MISSING_TOKEN"
	ReasonInvalidToken   Reason = "INVALID_TOKEN"
	ReasonTokenExpired   Reason = "TOKEN_EXPIRED"
	ReasonRoleNotAllowed Reason = "ROLE_NOT_ALLOWED"
	ReasonOtherUser      Reason = "OTHER_USER"
	ReasonRateLimited    Reason = "RATE_LIMITED"
	// permission_denied: a support operator's Adjust over its limit of one
	// adjustment, or over its limit of the day (UTC); nothing is written.
	ReasonAdjustmentOverLimit Reason = "ADJUSTMENT_OVER_LIMIT"
	ReasonDailyLimitReached   Reason = "DAILY_LIMIT_REACHED"

	// Budgets (BudgetService, and Grant's budget_id). A grant's
	// BUDGET_EXHAUSTED and BUDGET_CLOSED (failed_precondition) and
	// BUDGET_NOT_FOUND (not_found) are final refusals, recorded under its
	// request_id like the others above; from BudgetService they are
	// answers to an admin's call, not recorded. INVALID_BUDGET
	// (invalid_argument): a budget_id, description or shards out of
	// bounds, or a budget_id on anything but a grant or a debit
	// adjustment. BUDGET_EXISTS
	// (already_exists): CreateBudget of a budget_id taken.
	ReasonBudgetExhausted Reason = "BUDGET_EXHAUSTED"
	ReasonBudgetClosed    Reason = "BUDGET_CLOSED"
	ReasonBudgetNotFound  Reason = "BUDGET_NOT_FOUND"
	ReasonInvalidBudget   Reason = "INVALID_BUDGET"
	ReasonBudgetExists    Reason = "BUDGET_EXISTS"
	// failed_precondition from Adjust: a debit that gives back to a
	// budget more than the user's grants from it gave, less earlier
	// give-backs; from ReverseGrant: a reversal of a grant from a budget
	// whose points an Adjust gave back already (final, recorded).
	ReasonGiveBackExceedsGrants Reason = "GIVE_BACK_EXCEEDS_GRANTS"

	// Point kinds (PointKindService, and a credit's kind, a spend's
	// merchant_id and category). KIND_NOT_FOUND (not_found): a credit of a
	// kind that does not exist, a final refusal recorded under its
	// request_id; or Get/UpdatePointKind of none. TOO_MANY_KINDS
	// (failed_precondition): CreatePointKind beyond the program's bound.
	// KIND_EXISTS (already_exists): CreatePointKind of a kind_id taken.
	// INVALID_KIND, INVALID_MERCHANT_ID, INVALID_CATEGORY
	// (invalid_argument): a kind_id, priority, description or list out of
	// bounds, a kind on anything but a credit, a merchant_id or category
	// on anything but a purchase or an authorization. A purchase's
	// INSUFFICIENT_BALANCE carries ErrorInfo metadata "spendable": what it
	// could have spent where it was made.
	ReasonKindNotFound      Reason = "KIND_NOT_FOUND"
	ReasonTooManyKinds      Reason = "TOO_MANY_KINDS"
	ReasonKindExists        Reason = "KIND_EXISTS"
	ReasonInvalidKind       Reason = "INVALID_KIND"
	ReasonInvalidMerchantID Reason = "INVALID_MERCHANT_ID"
	ReasonInvalidCategory   Reason = "INVALID_CATEGORY"
)

// Reasons are all the reasons ledgerd sends, in the order declared above:
// a bounded set, for a program (or a metric) that tells them apart and
// folds anything else into one value.
func Reasons() []Reason {
	return []Reason{
		ReasonInvalidAmount,
		ReasonInvalidUserID,
		ReasonInvalidRequestID,
		ReasonInvalidOrderID,
		ReasonInvalidMetadata,
		ReasonInvalidPageSize,
		ReasonInvalidPageToken,
		ReasonInvalidFilter,
		ReasonInvalidAdjustment,
		ReasonInvalidStatus,
		ReasonInvalidExpiry,
		ReasonInvalidHold,
		ReasonInvalidMinVersion,
		ReasonInvalidEventType,
		ReasonEndpointURLNotAllowed,
		ReasonInvalidEndpointID,
		ReasonInvalidDescription,
		ReasonInvalidEffectiveTime,
		ReasonInvalidReason,
		ReasonMalformedRequest,
		ReasonUnsupportedMediaType,
		ReasonMethodNotAllowed,
		ReasonInsufficientBalance,
		ReasonAccountFrozen,
		ReasonRefundExceedsPurchase,
		ReasonPurchaseNotFound,
		ReasonAccountNotFound,
		ReasonBalanceLimit,
		ReasonTooManyBuckets,
		ReasonHoldNotFound,
		ReasonHoldNotHeld,
		ReasonHoldExpired,
		ReasonCaptureExceedsHold,
		ReasonTooManyHolds,
		ReasonTooManyPending,
		ReasonGrantNotFound,
		ReasonReversalExceedsGrant,
		ReasonMinVersionAheadOfLedger,
		ReasonEndpointNotFound,
		ReasonBalanceMoved,
		ReasonNothingToExplain,
		ReasonNotTheDifference,
		ReasonReconciliationRunning,
		ReasonRequestIDReused,
		ReasonTooManyConflicts,
		ReasonThrottled,
		ReasonHistoryBehind,
		ReasonInternal,
		ReasonUnknownProcedure,
		ReasonNotConfigured,
		ReasonMissingToken,
		ReasonInvalidToken,
		ReasonTokenExpired,
		ReasonRoleNotAllowed,
		ReasonOtherUser,
		ReasonRateLimited,
		ReasonBudgetExhausted,
		ReasonBudgetClosed,
		ReasonBudgetNotFound,
		ReasonInvalidBudget,
		ReasonBudgetExists,
		ReasonGiveBackExceedsGrants,
		ReasonAdjustmentOverLimit,
		ReasonDailyLimitReached,
		ReasonKindNotFound,
		ReasonTooManyKinds,
		ReasonKindExists,
		ReasonInvalidKind,
		ReasonInvalidMerchantID,
		ReasonInvalidCategory,
	}
}

// errorInfo is the pointledger ErrorInfo of err, if err is (or wraps) a
// *connect.Error that carries one.
func errorInfo(err error) (*errdetails.ErrorInfo, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info, true
		}
	}
	return nil, false
}

// ReasonOf returns the reason of err, a ledgerd error; "" if err is nil or
// has no reason (a failure of the network, of a proxy, or of the client
// itself).
func ReasonOf(err error) Reason {
	if info, ok := errorInfo(err); ok {
		return Reason(info.GetReason())
	}
	return ""
}

// IsReplayed says whether err is a refusal recorded earlier for the same
// request_id, sent again: the request was refused before, and is refused
// again without a new attempt (its ErrorInfo metadata has replayed:
// "true").
func IsReplayed(err error) bool {
	info, ok := errorInfo(err)
	return ok && info.GetMetadata()["replayed"] == "true"
}
