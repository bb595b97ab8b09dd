package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/throttle"
)

// Decoding a cancelled transaction (the last step of the write path, see
// write.go): which calls its reasons answer, and which race to retry on.

// decodeCancel settles the calls of a cancelled group that the reasons
// decide: a taken request record (a replay, or ALREADY_EXISTS), for a
// member or a refusal alike. A failed refund cap settles nothing but is
// progress too: another refund of the purchase committed since it was
// read, and the refund, planned again on the purchase as it is now, fits or
// is refused (and recorded) by the domain. It
// returns how many calls it settled or learnt about; else the cause to
// retry on (a race), or an error for a failure it cannot explain.
func (l *Ledger) decodeCancel(ctx context.Context, g group, reasons []types.CancellationReason) (settled int, retry, unexplained error) {
	rs := cancelReasons(reasons)
	if settled = l.settleDecided(ctx, g, rs); settled > 0 {
		return settled, nil, nil
	}
	l.noteBudgetThrottles(ctx, g, rs.code)
	retry, unexplained = cancelCause(g, rs)
	return 0, retry, unexplained
}

// cancelReasons are a cancelled transaction's reasons, one per item.
type cancelReasons []types.CancellationReason

// code is the reason code of item i, or "" if there is none.
func (rs cancelReasons) code(i int) string {
	if i >= 0 && i < len(rs) && rs[i].Code != nil {
		return *rs[i].Code
	}
	return ""
}

// failed says whether item i's condition failed.
func (rs cancelReasons) failed(i int) bool { return rs.code(i) == "ConditionalCheckFailed" }

// settleDecided settles the calls the reasons decide (a taken request
// record, a failed refund cap or reversal condition) and says how many.
func (l *Ledger) settleDecided(ctx context.Context, g group, rs cancelReasons) (settled int) {
	for _, p := range g.members {
		switch {
		case rs.failed(p.request):
			l.settleTaken(ctx, g, rs, p.c, p.request)
			settled++
		case rs.failed(p.cap) && p.c.m.Type == ledger.EntryReversal:
			l.settleReversalCap(ctx, p, rs)
			settled++
		case rs.failed(p.cap):
			l.settleRefundCap(ctx, p, rs)
			settled++
		}
	}
	for _, r := range g.refused {
		if rs.failed(r.record) {
			l.settleTaken(ctx, g, rs, r.c, r.record)
			settled++
		}
	}
	return settled
}

// settleTaken answers c, whose request record at item i was taken, and the
// repeats of c's request in the group, from the record that is there.
func (l *Ledger) settleTaken(ctx context.Context, g group, rs cancelReasons, c *call, i int) {
	rec, err := decodeRequest(rs[i].Item)
	if err != nil {
		// No usable old item came back: read the record itself.
		c.finish(l.refuse(ctx, c.m, fmt.Errorf("request record of %q reported taken but not found", c.m.RequestID)))
		return
	}
	c.finish(l.replay(ctx, c.m, rec))
	for _, r := range g.repeats {
		if r.c.m.RequestID == c.m.RequestID && !isDone(r.c) {
			r.c.finish(l.replay(ctx, r.c.m, rec))
		}
	}
}

// settleReversalCap learns from a reversal's failed condition on its grant:
// another reversal of the grant committed since it was read.
func (l *Ledger) settleReversalCap(ctx context.Context, p *planned, rs cancelReasons) {
	m := p.c.m
	reversed, err := l.reversedOf(ctx, m.UserID, p.purchase.Version, rs[p.cap].Item)
	switch {
	case err != nil:
		p.c.finish(ledger.Result{}, err)
	case !reversed.GreaterThan(p.purchase.Reversed):
		p.c.finish(ledger.Result{}, fmt.Errorf("reversal condition of grant %q failed at %s reversed, which allows the reversal", m.GrantRequestID, reversed))
	}
}

// settleRefundCap learns from a refund's failed cap. Planned on the
// refunded amount it read, it failed only if another refund committed
// since: planned again on the purchase as it is now, it fits or is refused
// (and recorded).
func (l *Ledger) settleRefundCap(ctx context.Context, p *planned, rs cancelReasons) {
	m := p.c.m
	refunded, err := l.refundedOf(ctx, m.UserID, p.purchase.Version, rs[p.cap].Item)
	switch {
	case err != nil:
		p.c.finish(ledger.Result{}, err)
	case !refunded.GreaterThan(p.purchase.Refunded):
		p.c.finish(ledger.Result{}, fmt.Errorf("refund cap of purchase %q failed at %s refunded, which allows the refund", m.PurchaseRequestID, refunded))
	}
}

// cancelCause explains a cancellation that settled no call: the race to
// retry on (a conflict, a throttle, a budget or an account that moved, an
// entry's key taken), else an error for a failure it cannot explain.
func cancelCause(g group, rs cancelReasons) (retry, unexplained error) {
	for i := range rs {
		switch c := rs.code(i); {
		case c == "TransactionConflict":
			return fmt.Errorf("%w: item %d: %s", errConflict, i, c), nil
		case throttle.Reason(c):
			return fmt.Errorf("%w: item %d: %s", errThrottled, i, c), nil
		}
	}
	if err := budgetRaced(g, rs.code); err != nil {
		return err, nil
	}
	if rs.failed(0) {
		return accountCause(g, rs)
	}
	return memberCause(g, rs)
}

// accountCause explains a failed condition on the account (item 0): it
// moved since it was read (a race), or it did not and the store did not
// say which other item failed.
func accountCause(g group, rs cancelReasons) (retry, unexplained error) {
	old, ok, err := decodeAccount(rs[0].Item)
	if err != nil {
		return nil, err
	}
	if ok != (g.before.Version > 0) || (ok && !sameAccount(old, g.before)) {
		return fmt.Errorf("%w: account moved from version %d", errRetry, g.before.Version), nil
	}
	// The account is as planned, yet its condition failed: the store
	// did not say which other item failed. Each call with a record in
	// the group checks it before this becomes an error.
	return nil, fmt.Errorf("account condition of user %q failed at version %d for no known reason", g.before.UserID, old.Version)
}

// memberCause explains a failed condition on a member's items, the account
// as planned: an entry's key taken (a race), or a hold's record that is not
// the open hold (an error).
func memberCause(g group, rs cancelReasons) (retry, unexplained error) {
	for _, p := range g.members {
		for _, i := range p.puts {
			if rs.failed(i) {
				return fmt.Errorf("%w: entry item %d exists", errRetry, i), nil
			}
		}
		for _, i := range p.holds {
			// The account, as planned, holds the hold open, and its record
			// is not HELD (or not there): no race explains that, only a
			// ledger changed behind its back, which the audit reports.
			if rs.failed(i) {
				return nil, fmt.Errorf("hold record of user %q at item %d is not the open hold the account holds: reconcile", g.before.UserID, i)
			}
		}
	}
	return nil, fmt.Errorf("transaction for user %q cancelled for an unexpected reason: %v", g.before.UserID, codes(rs))
}

// refundedOf is what the purchase at version has refunded: from old, the
// purchase as a failed condition returned it, or else read.
func (l *Ledger) refundedOf(ctx context.Context, user string, version int64, old map[string]types.AttributeValue) (decimal.Decimal, error) {
	e, ok, err := decodeEntry(old)
	if err != nil || !ok {
		if e, ok, err = l.entry(ctx, user, version); err != nil {
			return decimal.Decimal{}, err
		}
	}
	if !ok || !e.Type.Refundable() {
		return decimal.Decimal{}, fmt.Errorf("refund cap of entry %d of %q failed: it is no purchase", version, user)
	}
	return e.RefundedAmount, nil
}

// reversedOf is what the grant at version has had reversed: from old, the
// grant as a failed condition returned it, or else read.
func (l *Ledger) reversedOf(ctx context.Context, user string, version int64, old map[string]types.AttributeValue) (decimal.Decimal, error) {
	e, ok, err := decodeEntry(old)
	if err != nil || !ok {
		if e, ok, err = l.entry(ctx, user, version); err != nil {
			return decimal.Decimal{}, err
		}
	}
	if !ok || e.Type != ledger.EntryGrant {
		return decimal.Decimal{}, fmt.Errorf("reversal condition of entry %d of %q failed: it is no grant", version, user)
	}
	return e.ReversedAmount, nil
}

// errRetry marks an attempt that lost a race and may simply be tried again;
// errThrottled one that DynamoDB refused for capacity;
// errConflict one that DynamoDB cancelled for a concurrent transaction.
var (
	errRetry     = errors.New("retry")
	errThrottled = fmt.Errorf("%w: throttled", errRetry)
	errConflict  = fmt.Errorf("%w: conflict", errRetry)
)

// unavailable is err as a caller can act on it: a throttled read or write
// is unavailable, THROTTLED (nothing was done; try again later), anything
// else as it is. A TransactGetItems is throttled as a transaction is: a
// TransactionCanceledException with ThrottlingError reasons.
func unavailable(err error, what string) error {
	if throttle.Throttled(err) {
		return ledger.Errorf(ledger.KindUnavailable, ledger.ReasonThrottled,
			"%s: DynamoDB throttled the request; retrying later is safe", what)
	}
	return err
}

// retryReason names the race that retry lost, for the Observer.
func retryReason(retry error) string {
	switch {
	case errors.Is(retry, errConflict):
		return RetryTransactionConflict
	case errors.Is(retry, errThrottled):
		return RetryThrottled
	}
	return RetryVersionMoved
}

// sameAccount says whether two reads of an aggregate show the same state.
func sameAccount(a, b ledger.Account) bool {
	return a.Version == b.Version && a.Status == b.Status && a.Balance.Equal(b.Balance) && a.Pending.Equal(b.Pending)
}

func codes(reasons []types.CancellationReason) []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = aws.ToString(r.Code)
	}
	return out
}
