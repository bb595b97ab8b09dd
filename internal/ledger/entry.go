package ledger

import (
	"fmt"
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
}

// Account is the aggregate: a versioned snapshot of the fold of a user's
// entries. The zero Account (version 0, balance 0) is a user with no entries.
type Account struct {
	UserID     string
	Balance    decimal.Decimal
	Version    int64
	Status     Status
	CreateTime time.Time
	UpdateTime time.Time
}

// NewAccount is the state of a user before the first entry.
func NewAccount(userID string) Account {
	return Account{UserID: userID, Status: StatusActive}
}

// Apply folds one entry into the account. It fails when the entry does not
// follow the account's version or would make the balance negative.
func (a Account) Apply(e Entry) (Account, error) {
	if e.Version != a.Version+1 {
		return a, fmt.Errorf("entry version %d does not follow account version %d", e.Version, a.Version)
	}
	balance := a.Balance.Add(e.Amount)
	if balance.IsNegative() {
		return a, fmt.Errorf("entry version %d makes the balance negative (%s)", e.Version, balance)
	}
	if !balance.Equal(e.BalanceAfter) {
		return a, fmt.Errorf("entry version %d says balance after %s, fold gives %s", e.Version, e.BalanceAfter, balance)
	}
	a.Balance = balance
	a.Version = e.Version
	return a, nil
}

// Fold replays entries, in version order, from a user with no entries.
func Fold(userID string, entries []Entry) (Account, error) {
	a := NewAccount(userID)
	for _, e := range entries {
		var err error
		if a, err = a.Apply(e); err != nil {
			return a, err
		}
	}
	return a, nil
}

// HistoryQuery selects and pages a user's history.
type HistoryQuery struct {
	PageSize    int         // see PageSize: default 50, more than 500 is read as 500
	PageToken   string      // from the previous page, asked with the same filters
	Types       []EntryType // none: every type
	Start, End  time.Time   // create_time in [Start, End); zero: unbounded
	OldestFirst bool        // default: newest first
}
