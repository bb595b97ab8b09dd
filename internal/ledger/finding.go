package ledger

import "fmt"

// Kinds of Finding.
const (
	FindingBalanceMismatch     = "balance_mismatch"      // aggregate balance != fold of entries
	FindingVersionMismatch     = "version_mismatch"      // aggregate version != number of entries
	FindingVersionGap          = "version_gap"           // entry versions are not 1..N
	FindingBalanceAfter        = "balance_after"         // an entry's balance_after != running fold
	FindingNegativeBalance     = "negative_balance"      // the fold went below zero
	FindingRequestWithoutEntry = "request_without_entry" // a request record names no matching entry
	FindingEntryWithoutRequest = "entry_without_request" // an entry has no request record
	FindingRefundOverCap       = "refund_over_cap"       // refunds of a purchase exceed it
	FindingRefundedAmount      = "refunded_amount"       // a purchase's refunded_amount != its refunds
	FindingRefundTarget        = "refund_target"         // a refund names no purchase, or another one
	FindingRequestMismatch     = "request_mismatch"      // a request record's type or amount != its entry's
	FindingDuplicateRequest    = "duplicate_request"     // two request records claim one entry
	FindingBuckets             = "buckets"               // the aggregate's buckets != the fold of the entries' credits and draws
	FindingHeld                = "held"                  // the aggregate's held != the fold's, or != the sum of its open holds
	FindingHolds               = "holds"                 // the aggregate's open holds != the fold's (by request_id and amount)
	FindingHoldRecord          = "hold_record"           // a hold's record disagrees with its entries, or one of the two is missing
	FindingHoldResolved        = "hold_resolved"         // a hold resolved more than once (two CAPTUREs or RELEASEs name it)
	FindingCaptureOverHold     = "capture_over_hold"     // a capture spent more than its hold held
	FindingExpiryNotRecorded   = "expiry_not_recorded"   // a bucket or hold expired long ago, and no entry says so yet (is the sweeper running?)
	FindingPending             = "pending"               // the aggregate's pending or pending lots != the fold's, or pending != the sum of its lots
	FindingReversalTarget      = "reversal_target"       // a reversal names no grant, or another one
	FindingReversalOverGrant   = "reversal_over_grant"   // reversals of a grant exceed it
	FindingReversedAmount      = "reversed_amount"       // a grant's reversed_amount != its reversals
	FindingMaturityNotRecorded = "maturity_not_recorded" // a pending grant matured long ago, and no MATURATION says so yet (is the sweeper running?)
	FindingIneligibleDraw      = "ineligible_draw"       // a spend drew points its merchant and category may not spend (kind.go)

	FindingProjectionMissing  = "projection_missing"  // history lacks an entry (after the grace period)
	FindingProjectionExtra    = "projection_extra"    // history has an entry the ledger does not
	FindingProjectionMismatch = "projection_mismatch" // a history item differs from its entry
	FindingProjectionState    = "projection_state"    // the history state disagrees with the ledger

	FindingSumMismatch = "sum_mismatch" // all users: the sum of entries != the sum of balances
)

// Finding is one way a user's ledger breaks an invariant of package ledger.
type Finding struct {
	UserID   string  `json:"user_id"`
	BudgetID string  `json:"budget_id,omitempty"` // findings about a budget (budget_audit.go), which name no user
	Kind     string  `json:"kind"`
	Expected string  `json:"expected"`
	Found    string  `json:"found"`
	Versions []int64 `json:"versions,omitempty"`
	Repaired bool    `json:"repaired,omitempty"` // fixed by this reconciliation (projection findings only)
}

func (f Finding) String() string {
	if f.BudgetID != "" {
		return fmt.Sprintf("budget %s %s: expected %s, found %s", f.BudgetID, f.Kind, f.Expected, f.Found)
	}
	return fmt.Sprintf("%s %s: expected %s, found %s (versions %v)", f.UserID, f.Kind, f.Expected, f.Found, f.Versions)
}
