package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The write path. Every mutation is one TransactWriteItems of these items, in
// this order (the order CancellationReasons come back in):
//
//	0  Put entry E#<version+1>        if it does not exist
//	1  Put request record R#<id>      if it does not exist (the idempotency key)
//	2  Update account A               if version = expected, and for purchases
//	                                  status = active AND balance >= amount
//	                                  (admin debits: balance >= amount)
//	3  Update purchase E#<v> (refund) if refunded_amount <= amount - refund
//
// The aggregate is read first (ConsistentRead) only to compute the next state;
// the conditions decide. A cancelled transaction is decoded item by item:
// a taken request_id becomes a replay or ALREADY_EXISTS, a failed balance or
// status guard a FAILED_PRECONDITION, a moved version or a TransactionConflict
// a retry with jittered backoff, up to Retry.MaxAttempts, then ABORTED.
const (
	itemEntry = iota
	itemRequest
	itemAccount
	itemPurchase
)

// Apply appends the entry of m to its user's ledger, exactly once per
// request_id. Mutations of one user are serialised inside this process (so
// they queue instead of racing); other processes are fenced by the version
// condition.
func (l *Ledger) Apply(ctx context.Context, m ledger.Mutation) (ledger.Result, error) {
	unlock, err := l.locks.lock(ctx, m.UserID)
	if err != nil {
		return ledger.Result{}, err
	}
	defer unlock()

	for attempt := 1; ; attempt++ {
		res, err := l.attempt(ctx, m)
		if !errors.Is(err, errRetry) {
			return res, err
		}
		if attempt >= l.retry.MaxAttempts {
			l.log.WarnContext(ctx, "retries exhausted", "user_id", m.UserID, "request_id", m.RequestID, "attempts", attempt, "cause", err)
			// An earlier attempt may have committed with its answer lost.
			return l.refuse(ctx, m, giveUp(err, attempt))
		}
		if err := sleep(ctx, l.retry.backoff(attempt)); err != nil {
			return ledger.Result{}, err
		}
	}
}

// errRetry marks an attempt that lost a race and may simply be tried again;
// errThrottled one that DynamoDB refused for capacity.
var (
	errRetry     = errors.New("retry")
	errThrottled = fmt.Errorf("%w: throttled", errRetry)
)

func giveUp(cause error, attempts int) error {
	if errors.Is(cause, errThrottled) {
		return ledger.Errorf(ledger.KindUnavailable, ledger.ReasonThrottled,
			"gave up after %d attempts: DynamoDB throttled the writes; retrying later with the same request_id is safe", attempts)
	}
	return ledger.Errorf(ledger.KindAborted, ledger.ReasonTooManyConflicts,
		"gave up after %d attempts: concurrent writers kept changing the account; retrying with the same request_id is safe", attempts)
}

// attempt is one read of the aggregate and one transaction.
func (l *Ledger) attempt(ctx context.Context, m ledger.Mutation) (ledger.Result, error) {
	acct, err := l.account(ctx, m.UserID)
	if err != nil {
		return ledger.Result{}, err
	}
	var purchase requestRecord
	if m.Type == ledger.EntryRefund {
		rec, ok, err := l.request(ctx, m.UserID, m.PurchaseRequestID)
		if err != nil {
			return ledger.Result{}, err
		}
		if !ok || rec.Type != ledger.EntryPurchase {
			return l.refuse(ctx, m, ledger.Errorf(ledger.KindNotFound, ledger.ReasonPurchaseNotFound,
				"user %q has no purchase with request_id %q", m.UserID, m.PurchaseRequestID))
		}
		purchase = rec
	}
	if acct.Version == 0 {
		// No account, so no entries and no request records: only a credit
		// can come first.
		switch {
		case m.ExplainBalance:
			return ledger.Result{}, ledger.Errorf(ledger.KindNotFound, ledger.ReasonAccountNotFound, "user %q has no account", m.UserID)
		case m.Spends() || m.Type == ledger.EntryRefund:
			return ledger.Result{}, insufficient(m, acct)
		}
	}

	now := l.now().UTC().Truncate(time.Microsecond)
	balance := acct.Balance.Add(m.Delta())
	if m.ExplainBalance {
		if !acct.Balance.Equal(m.ExpectedBalance) {
			return l.refuse(ctx, m, balanceMoved(m, acct))
		}
		balance = acct.Balance // the entry explains the balance; it does not move it
	}
	if balance.GreaterThan(ledger.MaxBalance) {
		return l.refuse(ctx, m, ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonBalanceLimit,
			"the balance would exceed %s", ledger.MaxBalance))
	}
	entry := ledger.Entry{
		ID:                l.newID(now),
		UserID:            m.UserID,
		Version:           acct.Version + 1,
		Type:              m.Type,
		Amount:            m.Delta(),
		BalanceAfter:      balance,
		RequestID:         m.RequestID,
		OrderID:           m.OrderID,
		CreateTime:        now,
		Metadata:          m.Metadata,
		PurchaseRequestID: m.PurchaseRequestID,
		PurchaseVersion:   purchase.Version,
		Reason:            m.Reason,
		ExplainsBalance:   m.ExplainBalance,
	}
	items := []types.TransactWriteItem{
		itemEntry: {Put: &types.Put{
			TableName:           &l.table,
			Item:                entryItem(entry),
			ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}},
		itemRequest: {Put: &types.Put{
			TableName:                           &l.table,
			Item:                                requestItem(m, entry),
			ConditionExpression:                 aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
		itemAccount: {Update: accountUpdate(l.table, m, acct, entry)},
	}
	if m.Type == ledger.EntryRefund {
		items = append(items, types.TransactWriteItem{Update: purchaseRefundUpdate(l.table, m, purchase)})
	}

	_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: items,
		// Lets the SDK's own retries of this call (after a lost response) be
		// answered with the first outcome instead of a failed condition.
		ClientRequestToken: aws.String(l.newID(now)),
	})
	if err == nil {
		return ledger.Result{Entry: entry, Balance: balance}, nil
	}
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		if ctx.Err() != nil {
			return ledger.Result{}, ctx.Err()
		}
		return ledger.Result{}, fmt.Errorf("transact write %s for user %q: %w", m.Type, m.UserID, err)
	}
	return l.decodeCancel(ctx, m, acct, purchase, canceled.CancellationReasons)
}

// decodeCancel turns the per-item reasons of a cancelled transaction into a
// result, an error for the caller, or errRetry.
func (l *Ledger) decodeCancel(ctx context.Context, m ledger.Mutation, acct ledger.Account, purchase requestRecord, reasons []types.CancellationReason) (ledger.Result, error) {
	code := func(i int) string {
		if i < len(reasons) && reasons[i].Code != nil {
			return *reasons[i].Code
		}
		return ""
	}
	// The request_id is taken: this is a replay (or a reuse), whatever else failed.
	if code(itemRequest) == "ConditionalCheckFailed" {
		if rec, err := decodeRequest(reasons[itemRequest].Item); err == nil {
			return l.replay(ctx, m, rec)
		}
		// No usable old item came back: read the record itself.
		return l.refuse(ctx, m, fmt.Errorf("request record of %q reported taken but not found", m.RequestID))
	}
	for i := range reasons {
		switch code(i) {
		case "TransactionConflict":
			return ledger.Result{}, fmt.Errorf("%w: item %d: %s", errRetry, i, code(i))
		case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			return ledger.Result{}, fmt.Errorf("%w: item %d: %s", errThrottled, i, code(i))
		}
	}
	if code(itemAccount) == "ConditionalCheckFailed" {
		old, ok, err := decodeAccount(reasons[itemAccount].Item)
		if err != nil {
			return ledger.Result{}, err
		}
		switch {
		case !ok || old.Version != acct.Version:
			return ledger.Result{}, fmt.Errorf("%w: account version moved from %d", errRetry, acct.Version)
		case m.Type == ledger.EntryPurchase && old.Status != ledger.StatusActive:
			return l.refuse(ctx, m, ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonAccountFrozen,
				"account of user %q is %s", m.UserID, old.Status))
		case m.Spends() && old.Balance.LessThan(m.Amount):
			return l.refuse(ctx, m, insufficient(m, old))
		case m.ExplainBalance && !old.Balance.Equal(m.ExpectedBalance):
			return l.refuse(ctx, m, balanceMoved(m, old))
		default:
			return ledger.Result{}, fmt.Errorf("account condition of user %q failed at version %d for no known reason", m.UserID, old.Version)
		}
	}
	if code(itemPurchase) == "ConditionalCheckFailed" {
		refunded := decimal.Zero
		if old, ok, err := decodeEntry(reasons[itemPurchase].Item); err == nil && ok {
			refunded = old.RefundedAmount
		}
		return l.refuse(ctx, m, ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonRefundExceedsPurchase,
			"refund of %s exceeds what is left of purchase %q: %s of %s already refunded",
			m.Amount, m.PurchaseRequestID, refunded, purchase.Amount))
	}
	if code(itemEntry) == "ConditionalCheckFailed" {
		return ledger.Result{}, fmt.Errorf("%w: entry version %d exists", errRetry, acct.Version+1)
	}
	return ledger.Result{}, fmt.Errorf("transaction for user %q cancelled for an unexpected reason: %v", m.UserID, codes(reasons))
}

// refuse returns err for m unless m's request_id was already used: a retry of
// a request that succeeded must get its original result even when the ledger
// has moved on since (the balance may no longer cover it, say). The store may
// not report every failed condition of a cancelled transaction, so a refusal
// checks the request record with a consistent read before it is final.
func (l *Ledger) refuse(ctx context.Context, m ledger.Mutation, refusal error) (ledger.Result, error) {
	rec, ok, err := l.request(ctx, m.UserID, m.RequestID)
	if err != nil {
		return ledger.Result{}, err
	}
	if ok {
		return l.replay(ctx, m, rec)
	}
	return ledger.Result{}, refusal
}

// replay answers a request whose request_id has a record: the original result
// if the request is the same, ALREADY_EXISTS if it is another.
func (l *Ledger) replay(ctx context.Context, m ledger.Mutation, rec requestRecord) (ledger.Result, error) {
	if rec.Hash != m.Hash() {
		return ledger.Result{}, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused,
			"request_id %q of user %q was used for another request (%s entry version %d)", m.RequestID, m.UserID, rec.Type, rec.Version)
	}
	e, ok, err := l.entry(ctx, m.UserID, rec.Version)
	if err != nil {
		return ledger.Result{}, err
	}
	if !ok {
		return ledger.Result{}, fmt.Errorf("request %q of user %q points at missing entry version %d", m.RequestID, m.UserID, rec.Version)
	}
	return ledger.Result{Entry: e, Balance: e.BalanceAfter, Replayed: true}, nil
}

func balanceMoved(m ledger.Mutation, acct ledger.Account) error {
	return ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonBalanceMoved,
		"balance of user %q is %s, not the expected %s: reconcile again", m.UserID, acct.Balance, m.ExpectedBalance)
}

func insufficient(m ledger.Mutation, acct ledger.Account) error {
	return ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonInsufficientBalance,
		"balance %s of user %q does not cover %s", acct.Balance, m.UserID, m.Amount)
}

// accountUpdate moves the aggregate from acct to the state after entry.
func accountUpdate(table string, m ledger.Mutation, acct ledger.Account, entry ledger.Entry) *types.Update {
	values := map[string]types.AttributeValue{
		":balance": num(entry.BalanceAfter),
		":version": numInt(entry.Version),
		":now":     str(formatTime(entry.CreateTime)),
	}
	var names map[string]string // "status" is a reserved word
	update := "SET balance = :balance, version = :version, update_time = :now"
	var cond string
	if acct.Version == 0 {
		cond = "attribute_not_exists(PK)"
		update += ", user_id = :user, #status = :active, create_time = :now"
		names = map[string]string{"#status": "status"}
		values[":user"] = str(m.UserID)
		values[":active"] = str(string(ledger.StatusActive))
	} else {
		cond = "version = :expected"
		values[":expected"] = numInt(acct.Version)
		switch {
		case m.Type == ledger.EntryPurchase:
			cond += " AND #status = :active AND balance >= :amount"
			names = map[string]string{"#status": "status"}
			values[":active"] = str(string(ledger.StatusActive))
			values[":amount"] = num(m.Amount)
		case m.Spends(): // an admin debit: frozen or not, never below zero
			cond += " AND balance >= :amount"
			values[":amount"] = num(m.Amount)
		case m.ExplainBalance:
			cond += " AND balance = :expected_balance"
			values[":expected_balance"] = num(m.ExpectedBalance)
		}
	}
	return &types.Update{
		TableName:                           &table,
		Key:                                 accountKey(m.UserID),
		UpdateExpression:                    &update,
		ConditionExpression:                 &cond,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// purchaseRefundUpdate adds a refund to its purchase, guarded so that the
// refunds never sum to more than the purchase. DynamoDB conditions cannot add,
// so the cap is precomputed: refunded_amount <= purchase amount - refund.
func purchaseRefundUpdate(table string, m ledger.Mutation, purchase requestRecord) *types.Update {
	return &types.Update{
		TableName:           &table,
		Key:                 entryKey(m.UserID, purchase.Version),
		UpdateExpression:    aws.String("SET refunded_amount = refunded_amount + :refund"),
		ConditionExpression: aws.String("#type = :purchase AND refunded_amount <= :cap"),
		ExpressionAttributeNames: map[string]string{
			"#type": "type",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":refund":   num(m.Amount),
			":purchase": str(string(ledger.EntryPurchase)),
			":cap":      num(purchase.Amount.Sub(m.Amount)),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// Retry bounds the retries of an attempt that lost a race.
type Retry struct {
	MaxAttempts int           // attempts in all, at least 1
	BaseDelay   time.Duration // the first backoff's upper bound
	MaxDelay    time.Duration // no backoff is longer
}

// DefaultRetry suits a hot user on the real service: about 1.5 s in the worst case.
var DefaultRetry = Retry{MaxAttempts: 10, BaseDelay: 5 * time.Millisecond, MaxDelay: 250 * time.Millisecond}

// backoff is "full jitter": uniform in [0, min(MaxDelay, BaseDelay*2^(attempt-1))].
func (r Retry) backoff(attempt int) time.Duration {
	d := r.BaseDelay << min(attempt-1, 20)
	if d <= 0 || d > r.MaxDelay {
		d = r.MaxDelay
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func codes(reasons []types.CancellationReason) []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = aws.ToString(r.Code)
	}
	return out
}
