package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// EntryType is what kind of change an entry made to a balance.
type EntryType string

const (
	EntryGrant      EntryType = "GRANT"
	EntryPurchase   EntryType = "PURCHASE"
	EntryRefund     EntryType = "REFUND"
	EntryAdjustment EntryType = "ADJUSTMENT"
	// EntryExpiration takes expired points off the balance. The ledger
	// writes it itself, before the user's next mutation or by the sweeper.
	EntryExpiration EntryType = "EXPIRATION"
	// EntryHold reserves points for a checkout: amount 0, held_change +x.
	EntryHold EntryType = "HOLD"
	// EntryCapture spends a hold, like a purchase of what it captures; what
	// it does not capture goes back to the buckets (held_change -x).
	EntryCapture EntryType = "CAPTURE"
	// EntryRelease gives a hold's points back: amount 0, held_change -x;
	// its Reason says whether a Void or the hold's expiry let go.
	EntryRelease EntryType = "RELEASE"
	// EntryMaturation makes a pending grant's points spendable at its
	// effective time: amount +x, pending_change -x, into the bucket of the
	// grant's expiry. The ledger writes it itself, as it writes
	// expirations.
	EntryMaturation EntryType = "MATURATION"
	// EntryReversal takes back a grant's points (ReverseGrant): what is
	// still pending first (pending_change -x), then spendable points, drawn
	// as a purchase draws them (amount -y).
	EntryReversal EntryType = "REVERSAL"
)

// Status says whether an account may spend.
type Status string

const (
	StatusActive Status = "ACTIVE"
	StatusFrozen Status = "FROZEN"
)

// MaxBalance caps a balance (10^24), far below DynamoDB's 38 significant
// digits, so that no sum of balances can lose precision in the store.
var MaxBalance = decimal.New(1, 24)

// Entry is one immutable change to a user's balance.
type Entry struct {
	ID           string // ULID
	UserID       string
	Version      int64 // 1, 2, 3, ... per user, without gaps
	Type         EntryType
	Amount       decimal.Decimal // signed change: a purchase of 10 is -10
	BalanceAfter decimal.Decimal
	RequestID    string
	OrderID      string
	CreateTime   time.Time
	Metadata     map[string]string

	// Purchases: the sum of their refunds so far (the only field that changes).
	RefundedAmount decimal.Decimal
	// Refunds: the purchase they give back.
	PurchaseRequestID string
	PurchaseVersion   int64
	// Adjustments: why, and whether it explains the balance instead of
	// moving it (see Mutation).
	Reason          string
	ExplainsBalance bool

	// Credits: when the points expire (zero: never). Refunds go back to the
	// buckets their purchase drew, and say so in Draws instead.
	ExpireTime time.Time
	// Credits (grants, credit adjustments, maturations): the kind of their
	// points ("": standard, and every entry written before kinds). Draws
	// carry the kinds of what debits took.
	Kind string
	// Purchases, holds and captures: where they were spent (kind.go), so
	// that an audit can check that every draw was eligible.
	MerchantID string
	Category   string
	// Debits and expirations: what they took from which bucket; refunds:
	// what they gave back to which. In spending order. Holds: what they
	// hold of which bucket; captures: what they spent of their hold;
	// releases: what they give back.
	Draws []Draw

	// Holds, captures and releases: the change to what the account holds
	// (see Account.Held), and what it holds after. The amount of a hold or
	// a release is 0: holding does not move the balance, only what of it is
	// available.
	HeldChange decimal.Decimal
	HeldAfter  decimal.Decimal
	// Captures and releases: the hold they resolve (its request_id). Holds
	// keep their own expiry in ExpireTime.
	HoldRequestID string

	// Pending grants (and credit adjustments), maturations and reversals:
	// the change to what the account has pending (see Account.Pending), and
	// what it has pending after. A pending grant's amount is 0: its points
	// reach the balance by its MATURATION.
	PendingChange decimal.Decimal
	PendingAfter  decimal.Decimal
	// Pending grants and their maturations: when the points become
	// spendable.
	EffectiveTime time.Time
	// Maturations and reversals: the grant they mature or take back (its
	// request_id); reversals also its version.
	GrantRequestID string
	GrantVersion   int64
	// Grants: the sum of their reversals so far (it changes, as a
	// purchase's RefundedAmount does).
	ReversedAmount decimal.Decimal
	// Grants: the budget they drew on, if any; debit adjustments and
	// reversals of such grants: the budget they give back to (see
	// budget.go, BudgetAmount).
	BudgetID string
}

// System says whether the ledger wrote e itself, not asked by a request,
// so that it has no request_id: an entry of a System type (EXPIRATION), or
// the RELEASE of a hold that expired.
func (e Entry) System() bool {
	info, _ := e.Type.Info()
	return info.System || (e.Type == EntryRelease && e.Reason == ReleaseExpired)
}

// Account is the aggregate: a versioned snapshot of the fold of a user's
// entries. The zero Account (version 0, balance 0) is a user with no entries.
type Account struct {
	UserID  string
	Balance decimal.Decimal // the sum of the buckets, expired or not, and of what is held
	Buckets []Bucket        // by expiry, soonest first, never-expiring last, then by kind
	Held    decimal.Decimal // the sum of the open holds
	Holds   []Hold          // open holds, in version order
	// Pending is the sum of PendingLots: points granted that are not
	// spendable yet, outside the balance.
	Pending     decimal.Decimal
	PendingLots []PendingLot // in version order
	Version     int64
	Status      Status
	CreateTime  time.Time
	UpdateTime  time.Time
}

// NewAccount is the state of a user before the first entry.
func NewAccount(userID string) Account {
	return Account{UserID: userID, Status: StatusActive}
}

// Apply folds one entry into the account: its amount into the balance, its
// version and time. It is the one definition of what an entry does to an
// account, which the write path (Decide), the audit, the projection and
// the load test's checks share; what an entry's own balance_after says is
// the audit's to compare, not the fold's.
func (a Account) Apply(e Entry) Account {
	if a.Version == 0 {
		a.UserID, a.CreateTime = e.UserID, e.CreateTime
		if a.Status == "" {
			a.Status = StatusActive
		}
	}
	a.Balance = a.Balance.Add(e.Amount)
	a.Held = a.Held.Add(e.HeldChange)
	a.Pending = a.Pending.Add(e.PendingChange)
	switch e.Type {
	case EntryHold:
		for _, d := range e.Draws {
			a.Buckets = debit(a.Buckets, d)
		}
		a.Holds = append(slices.Clone(a.Holds), HoldOf(e))
	case EntryCapture:
		h, _ := a.Hold(e.HoldRequestID)
		for _, d := range releasedBy(h, e) {
			a.Buckets = credit(a.Buckets, d)
		}
		a.Holds = a.withoutHold(e.HoldRequestID)
	case EntryRelease:
		for _, d := range e.Draws {
			a.Buckets = credit(a.Buckets, d)
		}
		a.Holds = a.withoutHold(e.HoldRequestID)
	case EntryGrant, EntryAdjustment:
		if e.PendingChange.IsPositive() {
			a.PendingLots = append(slices.Clone(a.PendingLots), lotOf(e))
		}
		a.Buckets = a.applyBuckets(e)
	case EntryMaturation, EntryReversal:
		a.PendingLots = a.lotsLess(e.GrantRequestID, e.PendingChange.Neg())
		a.Buckets = a.applyBuckets(e)
	case EntryPurchase, EntryRefund, EntryExpiration:
		a.Buckets = a.applyBuckets(e)
	}
	a.Version = e.Version
	a.UpdateTime = e.CreateTime
	return a
}

// applyBuckets is the account's buckets after e.
func (a Account) applyBuckets(e Entry) []Bucket {
	bs := a.Buckets
	switch {
	case e.Amount.IsZero():
	case len(e.Draws) > 0 && e.Amount.IsPositive(): // a refund, back where its purchase drew
		for _, d := range e.Draws {
			bs = credit(bs, d)
		}
	case e.Amount.IsPositive():
		bs = credit(bs, Draw{Expire: e.ExpireTime, Amount: e.Amount, Kind: e.Kind})
	case len(e.Draws) > 0:
		for _, d := range e.Draws {
			bs = debit(bs, d)
		}
	default: // a debit written before buckets existed: in spending order
		for _, d := range spend(bs, e.Amount.Neg()) {
			bs = debit(bs, d)
		}
	}
	return bs
}

// Fold replays entries, in version order, from a user with no entries: the
// account they make and their totals. It fails on a version out of order,
// since a ledger with a gap folds to no account at all.
func Fold(userID string, entries []Entry) (Account, Totals, error) {
	a, t := NewAccount(userID), Totals{}
	for _, e := range entries {
		if e.Version != a.Version+1 {
			return a, t, fmt.Errorf("entry version %d of %q does not follow version %d", e.Version, userID, a.Version)
		}
		a, t = a.Apply(e), t.Add(e)
	}
	return a, t, nil
}

// HistoryQuery selects and pages a user's history.
type HistoryQuery struct {
	Page                    // the page token is good only with the same filters
	Types       []EntryType // none: every type
	Start, End  time.Time   // create_time in [Start, End); zero: unbounded
	OldestFirst bool        // default: newest first
	// Consistent reads the history strongly consistent, so that a read
	// after its state showed a version has that version's item (read your
	// writes); it costs a store twice the reads.
	Consistent bool
}

// Refundable says whether a refund may name e: a purchase or a capture,
// which keeps the sum of its refunds in RefundedAmount.
func (e Entry) Refundable() bool { return e.Type.Refundable() }

// MovesPending says whether e is a pending credit, a maturation or a
// reversal: an entry that changes what the account has pending (or, for
// a reversal of spendable points, names its grant as those do).
func (e Entry) MovesPending() bool {
	return !e.PendingChange.IsZero() || e.Type == EntryMaturation || e.Type == EntryReversal
}

// MovesHeld says whether e is a hold, a capture or a release: an entry that
// changes what the account holds.
func (e Entry) MovesHeld() bool {
	info, _ := e.Type.Info()
	return e.Type == EntryHold || info.ResolvesHold
}
