package ledger

import (
	"errors"
	"fmt"
)

// Kind classifies an Error; the API layer maps each kind to one wire code.
type Kind int

const (
	KindInternal           Kind = iota // a bug or an unexpected store failure
	KindInvalid                        // the request is malformed; nothing was written
	KindFailedPrecondition             // well-formed, but the ledger's state refuses it
	KindNotFound                       // something the request names does not exist
	KindAlreadyExists                  // the request_id was used for another request
	KindAborted                        // concurrent writers won every retry
	KindUnavailable                    // the store refused for capacity; try again later
)

// Reasons are machine-readable and stable: clients branch on them.
const (
	ReasonInvalidAmount         = "INVALID_AMOUNT"
	ReasonInvalidUserID         = "INVALID_USER_ID"
	ReasonInvalidRequestID      = "INVALID_REQUEST_ID"
	ReasonInvalidOrderID        = "INVALID_ORDER_ID"
	ReasonInvalidMetadata       = "INVALID_METADATA"
	ReasonInvalidPageSize       = "INVALID_PAGE_SIZE"
	ReasonInvalidPageToken      = "INVALID_PAGE_TOKEN"
	ReasonInvalidFilter         = "INVALID_FILTER"
	ReasonInvalidAdjustment     = "INVALID_ADJUSTMENT"
	ReasonInvalidStatus         = "INVALID_STATUS"
	ReasonAccountNotFound       = "ACCOUNT_NOT_FOUND"
	ReasonBalanceMoved          = "BALANCE_MOVED"
	ReasonNothingToExplain      = "NOTHING_TO_EXPLAIN"
	ReasonNotTheDifference      = "NOT_THE_DIFFERENCE"
	ReasonReconcileRunning      = "RECONCILIATION_RUNNING"
	ReasonInsufficientBalance   = "INSUFFICIENT_BALANCE"
	ReasonAccountFrozen         = "ACCOUNT_FROZEN"
	ReasonRefundExceedsPurchase = "REFUND_EXCEEDS_PURCHASE"
	ReasonPurchaseNotFound      = "PURCHASE_NOT_FOUND"
	ReasonRequestIDReused       = "REQUEST_ID_REUSED"
	ReasonTooManyConflicts      = "TOO_MANY_CONFLICTS"
	ReasonBalanceLimit          = "BALANCE_LIMIT"
	ReasonThrottled             = "THROTTLED"
	ReasonInvalidExpiry         = "INVALID_EXPIRY"
	ReasonTooManyBuckets        = "TOO_MANY_BUCKETS"
	ReasonHoldNotFound          = "HOLD_NOT_FOUND"
	ReasonHoldNotHeld           = "HOLD_NOT_HELD"
	ReasonHoldExpired           = "HOLD_EXPIRED"
	ReasonCaptureExceedsHold    = "CAPTURE_EXCEEDS_HOLD"
	ReasonTooManyHolds          = "TOO_MANY_HOLDS"
	ReasonInvalidHold           = "INVALID_HOLD"
	// Pending points and reversals.
	ReasonInvalidEffectiveTime = "INVALID_EFFECTIVE_TIME"
	ReasonTooManyPending       = "TOO_MANY_PENDING"
	ReasonGrantNotFound        = "GRANT_NOT_FOUND"
	ReasonReversalExceedsGrant = "REVERSAL_EXCEEDS_GRANT"
	ReasonInvalidReason        = "INVALID_REASON" // a reversal's reason: printable, bounded
	// ListHistory's min_version: negative; past the user's ledger; not
	// reached by the history within the wait.
	ReasonInvalidMinVersion = "INVALID_MIN_VERSION"
	ReasonMinVersionAhead   = "MIN_VERSION_AHEAD_OF_LEDGER"
	ReasonHistoryBehind     = "HISTORY_BEHIND"
	// WebhookService (issue 24): an endpoint's event types
	// (ParseSubscription), its URL (webhook.URLPolicy), its id and its
	// description.
	ReasonInvalidEventType      = "INVALID_EVENT_TYPE"
	ReasonEndpointURLNotAllowed = "ENDPOINT_URL_NOT_ALLOWED"
	ReasonEndpointNotFound      = "ENDPOINT_NOT_FOUND"
	ReasonInvalidEndpointID     = "INVALID_ENDPOINT_ID"
	ReasonInvalidDescription    = "INVALID_DESCRIPTION"
)

// Final says whether a refusal of this kind is the request's answer for
// good: a business refusal, which the store records under the request_id
// so that the same request again gets it again (Replayed) and is never
// tried anew. A malformed request, a reused request_id and the aborted,
// unavailable or internal outcomes are not final: nothing was decided, and
// the request may be sent again.
func (k Kind) Final() bool { return k == KindFailedPrecondition || k == KindNotFound }

// Error is the one error type of the domain.
type Error struct {
	Kind    Kind
	Reason  string // one of the Reason constants
	Message string // for people; may name the offending value
	// Replayed: the request was refused before, and this is that refusal
	// again, as recorded (see Kind.Final).
	Replayed bool
	// Metadata are facts of the refusal a program acts on without parsing
	// Message, such as a budget refusal's budget_id and remaining, or an
	// INSUFFICIENT_BALANCE refusal of a spend's MetadataSpendable; the API
	// sends them in the ErrorInfo's metadata. Recorded with a final
	// refusal, and replayed with it.
	Metadata map[string]string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error of the given kind and reason.
func Errorf(kind Kind, reason, format string, args ...any) *Error {
	return &Error{Kind: kind, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// AsError returns the *Error in err's chain, if any.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// ReasonOf returns the reason of the *Error in err's chain, or "".
func ReasonOf(err error) string {
	if e, ok := AsError(err); ok {
		return e.Reason
	}
	return ""
}
