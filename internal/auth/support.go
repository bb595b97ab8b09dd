package auth

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Reasons of a support operator's adjustment refused by its limits
// (permission_denied; nothing is written).
const (
	// ReasonAdjustmentOverLimit: one adjustment above SupportLimits.PerAdjustment.
	ReasonAdjustmentOverLimit = "ADJUSTMENT_OVER_LIMIT"
	// ReasonDailyLimitReached: the operator's adjustments of the day (UTC)
	// would pass SupportLimits.PerDay.
	ReasonDailyLimitReached = "DAILY_LIMIT_REACHED"
)

// OperatorKey is the metadata key that names who wrote an entry: the
// token's name of a support operator (and, through the console, of an
// admin). The interceptor sets it on a support token's adjustments,
// whatever the request said.
const OperatorKey = "operator"

// Allowances keep each operator's total of adjustments per day, shared by
// every instance (a DynamoDB item in production: package allowance; in
// memory for tests: NewMemoryAllowances).
type Allowances interface {
	// Take adds amount to operator's total of day if the total stays at
	// most limit, at once for every caller; taken is false, and nothing
	// changes, if it would not.
	Take(ctx context.Context, operator, day string, amount, limit decimal.Decimal) (taken bool, err error)
	// Give takes amount back off the total (an adjustment refused or
	// replayed after its Take).
	Give(ctx context.Context, operator, day string, amount decimal.Decimal) error
}

// SupportLimits bound what a support token may adjust. The zero value lets
// a support operator adjust nothing.
type SupportLimits struct {
	PerAdjustment decimal.Decimal // largest amount of one adjustment
	PerDay        decimal.Decimal // largest sum of one operator's adjustments in a day (UTC)
	Allowances    Allowances      // nil: support may not adjust
	Now           func() time.Time
}

// Day is the day (UTC) whose allowance an adjustment made at t takes from.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// adjust applies the limits around a support operator's Adjust: the
// operator goes on the entry's metadata, the amount must be within the
// limit of one adjustment and fit in the operator's allowance of the day,
// which is taken before the call and given back when the call writes
// nothing new (a refusal, an error, a replay). A crash between the two
// leaves the allowance smaller than what was adjusted, never larger.
func (l *SupportLimits) adjust(ctx context.Context, id Identity, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	msg, ok := req.Any().(*pb.AdjustRequest)
	if !ok {
		return nil, toConnect(denied(ReasonRoleDenied, "support: not an adjustment"))
	}
	if msg.ExplainBalance || msg.ExpectedBalance != "" || msg.BudgetId != "" {
		return nil, toConnect(denied(ReasonRoleDenied,
			"role support adjusts by an amount: explain_balance, expected_balance and budget_id are an admin's"))
	}
	if msg.Metadata == nil {
		msg.Metadata = map[string]string{}
	}
	msg.Metadata[OperatorKey] = id.Subject
	amount, err := ledger.ParseAmount(msg.Amount, 18)
	if err != nil {
		return next(ctx, req) // refused there, with its reason, before anything is written
	}
	if l.Allowances == nil || !l.PerAdjustment.IsPositive() || !l.PerDay.IsPositive() {
		return nil, toConnect(denied(ReasonAdjustmentOverLimit, "support adjustments are not configured on this server (-support-max-adjustment, -support-daily-limit)"))
	}
	if amount.GreaterThan(l.PerAdjustment) {
		return nil, toConnect(denied(ReasonAdjustmentOverLimit,
			fmt.Sprintf("an adjustment of %s is over the support limit of %s per adjustment; an admin may make it", amount, l.PerAdjustment)))
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	day := Day(now())
	taken, err := l.Allowances.Take(ctx, id.Subject, day, amount, l.PerDay)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("support allowance: %w", err))
	}
	if !taken {
		return nil, toConnect(denied(ReasonDailyLimitReached,
			fmt.Sprintf("operator %s: an adjustment of %s would pass the support limit of %s a day (%s UTC)", id.Subject, amount, l.PerDay, day)))
	}
	res, err := next(ctx, req)
	replayed := false
	if r, ok := res.(*connect.Response[pb.AdjustResponse]); ok && r.Msg != nil {
		replayed = r.Msg.Replayed
	}
	if err != nil || replayed {
		// The request's context may be over; the give-back must not be.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = l.Allowances.Give(gctx, id.Subject, day, amount) // failing, the allowance stays smaller: safe
	}
	return res, err
}

// isSupportAdjust reports whether a support operator calls Adjust.
func isSupportAdjust(id Identity, procedure string) bool {
	return id.Role == RoleSupport && procedure == pointledgerv1connect.AdminServiceAdjustProcedure
}

// MemoryAllowances keep allowances in this process: for tests, and for a
// single instance that may forget them when it restarts.
type MemoryAllowances struct {
	mu    sync.Mutex
	taken map[string]decimal.Decimal
}

var _ Allowances = (*MemoryAllowances)(nil)

// NewMemoryAllowances returns empty allowances.
func NewMemoryAllowances() *MemoryAllowances {
	return &MemoryAllowances{taken: map[string]decimal.Decimal{}}
}

func (m *MemoryAllowances) Take(_ context.Context, operator, day string, amount, limit decimal.Decimal) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := operator + "\x00" + day
	if sum := m.taken[k].Add(amount); !sum.GreaterThan(limit) {
		m.taken[k] = sum
		return true, nil
	}
	return false, nil
}

func (m *MemoryAllowances) Give(_ context.Context, operator, day string, amount decimal.Decimal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := operator + "\x00" + day
	m.taken[k] = m.taken[k].Sub(amount)
	return nil
}
