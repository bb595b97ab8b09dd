package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// Budgets: where a campaign's points come from. A GRANT that names a
// budget draws its amount from it, in the same commit as its entry, and is
// refused if the budget does not cover it: the check and the count are one
// conditional write, so that no two grants both see room the budget has
// once. For every budget, Granted + Remaining = Total, and Granted is the
// sum of the amounts of the grants that name it.
//
// A hot budget is split over Shards escrow shards (see BudgetShard): each
// holds part of what remains, and a grant draws on one of them only.

// BudgetStatus says whether a budget still gives points.
type BudgetStatus string

const (
	BudgetOpen   BudgetStatus = "OPEN"
	BudgetClosed BudgetStatus = "CLOSED"
)

// Budget is a campaign's budget as a store reads it: the sums over its
// shards.
type Budget struct {
	ID          string
	Total       decimal.Decimal // what was put in: the creation and the top-ups
	Granted     decimal.Decimal // the sum of the grants drawn from it
	Remaining   decimal.Decimal // Total - Granted
	Status      BudgetStatus
	Description string
	CreateTime  time.Time
	Shards      int // escrow shards: set at creation, grown by the store when throttled (doc.go)
}

// Budget limits. A budget's shards are written in one transaction when it
// is created or closed, with its own item and a request record: 100 items.
const (
	MaxBudgetShards       = 64
	MaxBudgetDescription  = 512
	DefaultBudgetShards   = 1
	ReasonBudgetExhausted = "BUDGET_EXHAUSTED"
	ReasonBudgetClosed    = "BUDGET_CLOSED"
	ReasonBudgetNotFound  = "BUDGET_NOT_FOUND"
	ReasonBudgetExists    = "BUDGET_EXISTS"
	ReasonInvalidBudget   = "INVALID_BUDGET"
	// A debit adjustment (or a reversal of a grant from a budget) gives
	// back to a budget more than the user's grants from it, less what was
	// given back before.
	ReasonGiveBackExceedsGrants = "GIVE_BACK_EXCEEDS_GRANTS"
)

// BudgetRef is what a store read of the budget a mutation names, for
// Decide (Facts.Budget). For a grant: its status, and what remains of it
// where the grant may draw: the grant's shard, or all shards together once
// the store found the shard dry and could not borrow enough for it. For a
// debit adjustment that gives points back to the budget (an admin's
// correction of a grant), or a reversal of a grant from it: UserNet, what
// the user's entries took from the budget, net of earlier give-backs
// (BudgetNet).
type BudgetRef struct {
	Status    BudgetStatus
	Remaining decimal.Decimal
	UserNet   decimal.Decimal
}

// BudgetNet is what entries took from budget: the sum of what the
// entries that name it take from it (Entry.BudgetAmount), grants less
// give-backs.
func BudgetNet(entries []Entry, budget string) decimal.Decimal {
	net := decimal.Zero
	for _, e := range entries {
		if e.BudgetID == budget {
			net = net.Add(e.BudgetAmount())
		}
	}
	return net
}

// BudgetAmount is what e takes from the budget it names (negative: gives
// back): its amount and its pending change. A pending grant draws on its
// budget when it is made, though its amount is 0 until it matures (its
// MATURATION names no budget); a reversal gives back what it takes of the
// grant, pending and spendable.
func (e Entry) BudgetAmount() decimal.Decimal {
	if e.BudgetID == "" {
		return decimal.Zero
	}
	return e.Amount.Add(e.PendingChange)
}

// checkGiveBack refuses a give-back of amount to budget b (nil: no such
// budget) by user's entries that took less than that from it, net of
// earlier give-backs (BudgetRef.UserNet): a debit adjustment naming the
// budget, or a reversal of a grant from it after an adjustment gave its
// points back already. So a budget never gets back more than was drawn.
func checkGiveBack(user, budget string, amount decimal.Decimal, b *BudgetRef) error {
	if b == nil {
		return BudgetNotFound(budget)
	}
	if amount.GreaterThan(b.UserNet) {
		return Errorf(KindFailedPrecondition, ReasonGiveBackExceedsGrants,
			"user %q has %s of budget %q to give back, less than %s", user, b.UserNet, budget, amount)
	}
	return nil
}

// checkBudget refuses a grant from a budget that the facts say is missing,
// closed, or does not cover it, and a give-back of more than the user took
// from the budget. Final refusals: recorded under the request_id like
// every other.
func checkBudget(m Mutation, f Facts) error {
	if m.BudgetID == "" {
		return nil
	}
	switch b := f.Budget; {
	case b == nil:
		return BudgetNotFound(m.BudgetID)
	case m.Type == EntryAdjustment: // a give-back: to a closed budget too
		return checkGiveBack(m.UserID, m.BudgetID, m.Amount, b)
	case b.Status != BudgetOpen:
		return BudgetIsClosed(m.BudgetID, "budget %q is closed", m.BudgetID)
	case b.Remaining.LessThan(m.Amount):
		err := Errorf(KindFailedPrecondition, ReasonBudgetExhausted,
			"budget %q has %s left, which does not cover %s", m.BudgetID, b.Remaining, m.Amount)
		err.Metadata = map[string]string{"budget_id": m.BudgetID, "remaining": b.Remaining.String()}
		return err
	}
	return nil
}

// BudgetIsClosed is the refusal of a grant from, or a top-up of, budget id,
// which is closed.
func BudgetIsClosed(id, format string, args ...any) *Error {
	err := Errorf(KindFailedPrecondition, ReasonBudgetClosed, format, args...)
	err.Metadata = map[string]string{"budget_id": id}
	return err
}

// BudgetCreation is a validated request to create a budget.
type BudgetCreation struct {
	BudgetID    string
	RequestID   string
	Amount      decimal.Decimal
	Description string
	Shards      int
}

// NewBudgetCreation validates a request to create budget id with amount,
// in shards escrow shards (0: DefaultBudgetShards). Amounts may have at
// most scale digits after the point.
func NewBudgetCreation(id, requestID, amount, description string, shards int, scale int32) (BudgetCreation, error) {
	if err := ValidateBudgetID(id); err != nil {
		return BudgetCreation{}, err
	}
	if err := validateID("request_id", ReasonInvalidRequestID, requestID); err != nil {
		return BudgetCreation{}, err
	}
	a, err := ParseAmount(amount, scale)
	if err != nil {
		return BudgetCreation{}, err
	}
	if len(description) > MaxBudgetDescription || !printable(description) {
		return BudgetCreation{}, Errorf(KindInvalid, ReasonInvalidBudget, "description must be printable text of at most %d bytes", MaxBudgetDescription)
	}
	if shards == 0 {
		shards = DefaultBudgetShards
	}
	if shards < 1 || shards > MaxBudgetShards {
		return BudgetCreation{}, Errorf(KindInvalid, ReasonInvalidBudget, "shards must be 1 to %d", MaxBudgetShards)
	}
	return BudgetCreation{BudgetID: id, RequestID: requestID, Amount: a, Description: description, Shards: shards}, nil
}

// Hash identifies the creation's content, for its request record.
func (c BudgetCreation) Hash() string {
	return budgetHash("create", c.BudgetID, c.RequestID, c.Amount.String(), c.Description, strconv.Itoa(c.Shards))
}

// BudgetTopUp is a validated request to add to a budget.
type BudgetTopUp struct {
	BudgetID  string
	RequestID string
	Amount    decimal.Decimal
}

// NewBudgetTopUp validates a request to add amount to budget id.
func NewBudgetTopUp(id, requestID, amount string, scale int32) (BudgetTopUp, error) {
	if err := ValidateBudgetID(id); err != nil {
		return BudgetTopUp{}, err
	}
	if err := validateID("request_id", ReasonInvalidRequestID, requestID); err != nil {
		return BudgetTopUp{}, err
	}
	a, err := ParseAmount(amount, scale)
	if err != nil {
		return BudgetTopUp{}, err
	}
	return BudgetTopUp{BudgetID: id, RequestID: requestID, Amount: a}, nil
}

// Hash identifies the top-up's content, for its request record.
func (u BudgetTopUp) Hash() string {
	return budgetHash("top-up", u.BudgetID, u.RequestID, u.Amount.String())
}

func budgetHash(fields ...string) string {
	h := sha256.New()
	for _, f := range fields {
		h.Write([]byte(strconv.Itoa(len(f))))
		h.Write([]byte{0})
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ValidateBudgetID checks a budget id: the id alphabet, as a user id.
func ValidateBudgetID(id string) error {
	return validateID("budget_id", ReasonInvalidBudget, id)
}

// BudgetShard is the shard of k a grant of requestID draws on: a hash of
// the request id, so that a retry goes to the same shard and grants spread
// evenly.
func BudgetShard(requestID string, k int) int {
	if k <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(requestID))
	return int(h.Sum32() % uint32(k)) //nolint:gosec // k <= MaxBudgetShards
}

// SplitBudget splits amount over k shards: equal parts at amount's own
// scale, the rest of the division on shard 0, so the parts add up to
// amount exactly.
func SplitBudget(amount decimal.Decimal, k int) []decimal.Decimal {
	k = max(k, 1)
	part := amount.Div(decimal.NewFromInt(int64(k))).Truncate(max(-amount.Exponent(), 0))
	parts := make([]decimal.Decimal, k)
	for i := range parts {
		parts[i] = part
	}
	parts[0] = amount.Sub(part.Mul(decimal.NewFromInt(int64(k - 1))))
	return parts
}

// Borrow plans how a dry shard target borrows need from the other shards,
// whose remaining amounts are remaining (target's included): what each
// gives, positive, by shard (0 for target and for shards that give
// nothing). Each donor, the fullest first, gives half of what it has, so
// that the target does not run dry again at once, and all it has if the
// halves fall short. ok is false when the others together have less than
// need: the budget cannot cover it.
func Borrow(remaining []decimal.Decimal, target int, need decimal.Decimal) (give []decimal.Decimal, ok bool) {
	give = make([]decimal.Decimal, len(remaining))
	var others decimal.Decimal
	for i, r := range remaining {
		if i != target && r.IsPositive() {
			others = others.Add(r)
		}
	}
	if others.LessThan(need) || !need.IsPositive() {
		return give, !others.LessThan(need)
	}
	order := make([]int, 0, len(remaining))
	for i := range remaining {
		if i != target && remaining[i].IsPositive() {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return remaining[b].Cmp(remaining[a]) })
	var got decimal.Decimal
	for _, i := range order {
		half := remaining[i].Div(decimal.NewFromInt(2)).Truncate(max(-remaining[i].Exponent(), 0))
		if !half.IsPositive() {
			half = remaining[i]
		}
		give[i], got = half, got.Add(half)
	}
	for _, i := range order { // the halves fell short: take the rest, fullest first
		if !got.LessThan(need) {
			break
		}
		more := decimal.Min(remaining[i].Sub(give[i]), need.Sub(got))
		give[i], got = give[i].Add(more), got.Add(more)
	}
	return give, true
}

// BudgetQuery pages the budgets (ListBudgets), by budget id.
type BudgetQuery struct {
	Page
}

// Check validates the query's page size, and returns it resolved.
func (q BudgetQuery) Check() (BudgetQuery, error) {
	var err error
	q.Page, err = q.check()
	return q, err
}

// Budgets is what a store keeps of budgets, beside the users' ledgers
// (Store): BudgetService's calls. Create and TopUp are idempotent by
// request_id (Replayed, or KindAlreadyExists for another request under
// it); Close is idempotent by nature (Replayed when it was closed).
type Budgets interface {
	CreateBudget(ctx context.Context, c BudgetCreation) (Budget, bool, error)
	TopUpBudget(ctx context.Context, u BudgetTopUp) (Budget, bool, error)
	CloseBudget(ctx context.Context, id string) (Budget, bool, error)
	Budget(ctx context.Context, id string) (Budget, error)
	ListBudgets(ctx context.Context, q BudgetQuery) ([]Budget, string, error)
}

// BudgetNotFound is the refusal of a call on budget id, which does not exist.
func BudgetNotFound(id string) *Error {
	err := Errorf(KindNotFound, ReasonBudgetNotFound, "budget %q does not exist", id)
	err.Metadata = map[string]string{"budget_id": id}
	return err
}
