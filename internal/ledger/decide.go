package ledger

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// Total names a running sum of an account: which one each entry type
// feeds is in its EntryTypeInfo.
type Total int

const (
	// TotalGranted is what grants put in the balance: grants spendable at
	// once and maturations, less what reversals took back of it. So the
	// totals still add up to the balance, and pending points are in none.
	TotalGranted  Total = iota + 1
	TotalSpent          // sum of purchases, positive
	TotalRefunded       // sum of refunds
	TotalAdjusted       // net sum of adjustments
	TotalExpired        // sum of expirations, positive
)

// EntryTypeInfo is what an entry type is, for every rule that depends on it.
// Adding a type is a row here; the switches the exhaustive linter checks
// (items, the API's conversions) then say what else must learn it.
type EntryTypeInfo struct {
	// Credit: the entry adds to the balance; else it takes away.
	// Adjustments are either, by Mutation.Debit.
	Credit bool
	// Spends: a debit of this type must be covered by what is available
	// (the balance less what is held).
	Spends bool
	// NoAmount: its amount is 0: it moves what is held, not the balance.
	NoAmount bool
	// NeedsActive: refused on a frozen account.
	NeedsActive bool
	// RefersToPurchase: names a purchase by its request_id.
	RefersToPurchase bool
	// Refundable: a refund may name it, as the purchase it gives back.
	Refundable bool
	// ResolvesHold: names an open hold by its request_id, and resolves it.
	ResolvesHold bool
	// Expires: a credit that lands in the bucket of its expire time.
	Expires bool
	// System: written by the ledger itself, not asked for by a request, so
	// it has no request_id nor idempotency record.
	System bool
	// Matures: a credit that may be pending, with an effective time.
	Matures bool
	// RefersToGrant: names a grant by its request_id, and takes its
	// points back.
	RefersToGrant bool
	// Total is the running sum the entry feeds.
	Total Total
}

// EntryTypes is every entry type and its properties.
var EntryTypes = map[EntryType]EntryTypeInfo{
	EntryGrant:      {Credit: true, Expires: true, Matures: true, Total: TotalGranted},
	EntryPurchase:   {Spends: true, NeedsActive: true, Refundable: true, Total: TotalSpent},
	EntryRefund:     {Credit: true, RefersToPurchase: true, Total: TotalRefunded},
	EntryAdjustment: {Credit: true, Spends: true, Expires: true, Matures: true, Total: TotalAdjusted}, // a debit only with Mutation.Debit
	EntryExpiration: {System: true, Total: TotalExpired},
	EntryHold:       {Spends: true, NeedsActive: true, NoAmount: true},
	// A capture spends what is already held: a frozen account still
	// captures, and nothing is checked against what is available.
	EntryCapture: {ResolvesHold: true, Refundable: true, Total: TotalSpent},
	// A void; the ledger also writes releases itself, for expired holds.
	EntryRelease: {ResolvesHold: true, NoAmount: true},
	// Written by the ledger at a pending grant's effective time.
	EntryMaturation: {Credit: true, System: true, Total: TotalGranted},
	// What it takes of spendable points is checked against what is
	// available in Decide, since only that part spends. A frozen account is
	// still reversed: the points were never the user's to keep.
	EntryReversal: {RefersToGrant: true, Total: TotalGranted},
}

// Info returns the properties of t, and whether t is an entry type.
func (t EntryType) Info() (EntryTypeInfo, bool) {
	i, ok := EntryTypes[t]
	return i, ok
}

// DefaultMaxBuckets bounds the distinct expiry times one account holds, so
// that the aggregate stays one small item.
const DefaultMaxBuckets = 100

// Facts are what deciding a mutation needs beyond the account, read by the
// store: the purchase a refund names, the sum of the entries an explaining
// adjustment explains; and the store's limits.
type Facts struct {
	// Purchase is the purchase a refund names; nil if the user has none with
	// that request_id. A refund over what the store knows is left of it is
	// refused here; that the refunds stay within it is the store's
	// condition, on the purchase as it is when the entry commits.
	Purchase *PurchaseRef
	// EntriesSum is the sum of the amounts of the account's entries (up to
	// its version), for an adjustment that explains the balance.
	EntriesSum decimal.Decimal
	// MaxBuckets bounds the account's buckets; 0: DefaultMaxBuckets.
	MaxBuckets int
	// Hold is the record of the hold a capture or a void names, when the
	// account has no open hold of that request_id; nil if the user has no
	// hold of it.
	Hold *HoldRef
	// MaxHolds bounds the account's open holds; 0: DefaultMaxHolds.
	MaxHolds int
	// Grant is the grant a reversal names; nil if the user has none with
	// that request_id. That the reversals stay within it is the store's
	// condition, on the grant as it is when the entry commits.
	Grant *GrantRef
	// MaxPending bounds the account's pending grants; 0:
	// DefaultMaxPending.
	MaxPending int
	// Budget is the budget a grant or a debit adjustment names
	// (Mutation.BudgetID), or the budget of the grant a reversal names
	// (GrantRef.BudgetID), as the store read it; nil if there is no such
	// budget (see checkBudget, checkGiveBack).
	Budget *BudgetRef
	// Kinds is the program's point kinds, a snapshot the store keeps (see
	// kind.go): it knows every kind the account and the mutation name
	// (Kinds.Missing), or Decide refuses a credit of an unknown kind and
	// spends no bucket of one. Nil: standard only.
	Kinds Kinds
}

// PurchaseRef is a purchase as a refund sees it.
type PurchaseRef struct {
	Version  int64
	Type     EntryType       // what the request_id names: a refund of anything but a purchase or a capture is refused
	Amount   decimal.Decimal // the purchase's positive amount
	Draws    []Draw          // what it took from which bucket (kind and expiry)
	Refunded decimal.Decimal // what earlier refunds gave back, as the store read the purchase
}

// Decision is what a mutation does to an account: the entries it appends,
// in version order and without IDs (the store gives them), and the account
// after them. Entries[Main] is the mutation's own entry; the others are
// releases of holds and expirations of buckets due before it, and the
// expiration of what it gave back to buckets that had expired.
type Decision struct {
	Entries []Entry
	Main    int
	After   Account
	// Hold is the hold the mutation made or resolved, as it is after it
	// (zero for other mutations).
	Hold Hold
}

// Entry is the mutation's own entry.
func (d Decision) Entry() Entry { return d.Entries[d.Main] }

// Time is when a mutation of acct decided at now takes effect: now, or the
// account's last entry's time if that is later (another process's clock
// ahead of this one's), so that entry times never go back and every process
// folds the same expiries.
func Time(acct Account, now time.Time) time.Time {
	now = now.UTC().Truncate(time.Microsecond) // what the store keeps
	if acct.UpdateTime.After(now) {
		return acct.UpdateTime
	}
	return now
}

// Decide decides m against acct at time now: the entries it appends and the
// account after, or a refusal (an *Error of kind KindFailedPrecondition or
// KindNotFound: final, see Kind.Final). Points whose bucket expired by then
// are taken off first, by an expiration entry. Decide reads nothing and
// writes nothing: the store supplies the account and the facts, and commits
// the decision, the entries or the refusal's record, only under conditions
// that the account and facts are still as read.
func Decide(acct Account, m Mutation, now time.Time, f Facts) (Decision, error) {
	info, ok := m.Type.Info()
	if !ok || info.System {
		return Decision{}, Errorf(KindInvalid, ReasonInvalidAmount, "%q is not an entry type a request may ask for", m.Type)
	}
	at := Time(acct, now)
	if acct.Version == 0 {
		created := NewAccount(m.UserID)
		created.CreateTime = at
		acct = created
	}
	d := Decision{}
	running := acct.expire(at, &d.Entries).withUnbucketed()
	hold, err := checkMutation(acct, running, m, f, len(d.Entries) > 0)
	if err != nil {
		return Decision{}, err
	}
	var purchase *PurchaseRef
	if info.RefersToPurchase {
		purchase = f.Purchase
	}
	e, err := entryOf(m, running, at, purchase, hold, f.Kinds)
	if err == nil && info.RefersToGrant {
		e, err = reversalOf(e, m, running, f.Grant, f.Budget)
	}
	if err != nil {
		return Decision{}, err
	}
	next := running.Apply(e)
	if m.ExplainBalance {
		next.Balance = running.Balance // the entry explains the balance; it does not move it
	}
	if maxBuckets := cmp.Or(f.MaxBuckets, DefaultMaxBuckets); len(next.Buckets) > maxBuckets && len(next.Buckets) > len(running.Buckets) {
		return Decision{}, Errorf(KindFailedPrecondition, ReasonTooManyBuckets,
			"user %q would hold points of %d kinds and expiry times, more than the %d allowed: grant with a kind and expiry the user already has, or none", m.UserID, len(next.Buckets), maxBuckets)
	}
	e.BalanceAfter, e.HeldAfter, e.PendingAfter = next.Balance, next.Held, next.Pending
	switch {
	case m.Type == EntryHold:
		d.Hold = HoldOf(e)
	case info.ResolvesHold:
		d.Hold = ResolvedHold(hold, e)
	}
	d.Main = len(d.Entries)
	d.Entries = append(d.Entries, e)
	// What a refund gave back to buckets that have expired expires at once,
	// on the record.
	d.After = next.expire(at, &d.Entries)
	return d, nil
}

// checkMutation refuses m for what the account and the facts say, in the
// order Decide reports refusals: acct is the account as read, running the
// account after what expired before m (expired: whether anything did). It
// returns the open hold m resolves, for a capture or a void.
func checkMutation(acct, running Account, m Mutation, f Facts, expired bool) (Hold, error) {
	info, _ := m.Type.Info()
	if _, ok := f.Kinds.Get(m.Kind); !ok {
		return Hold{}, PointKindNotFound(m.Kind)
	}
	if info.RefersToPurchase {
		if f.Purchase == nil || !f.Purchase.Type.Refundable() {
			return Hold{}, Errorf(KindNotFound, ReasonPurchaseNotFound,
				"user %q has no purchase with request_id %q", m.UserID, m.PurchaseRequestID)
		}
		if m.Amount.GreaterThan(f.Purchase.Amount.Sub(f.Purchase.Refunded)) {
			return Hold{}, Errorf(KindFailedPrecondition, ReasonRefundExceedsPurchase,
				"refund of %s exceeds what is left of purchase %q: %s of %s already refunded",
				m.Amount, m.PurchaseRequestID, f.Purchase.Refunded, f.Purchase.Amount)
		}
	}
	var hold Hold
	if info.ResolvesHold {
		var err error
		if hold, err = openHold(acct, running, m, f.Hold); err != nil {
			return Hold{}, err
		}
	}
	if m.ExplainBalance {
		if err := checkExplanation(running, m, f, expired); err != nil {
			return Hold{}, err
		}
	}
	if info.NeedsActive && acct.Version > 0 && acct.Status != StatusActive {
		return Hold{}, Errorf(KindFailedPrecondition, ReasonAccountFrozen, "account of user %q is %s", m.UserID, acct.Status)
	}
	if m.SpendsWhere() {
		if spendable := bucketSum(f.Kinds.Eligible(running.Buckets, m.MerchantID, m.Category)); spendable.LessThan(m.Amount) {
			return Hold{}, insufficient(m, spendable)
		}
	} else if m.Spends() && running.Available().LessThan(m.Amount) {
		if running.Held.IsPositive() {
			return Hold{}, Errorf(KindFailedPrecondition, ReasonInsufficientBalance,
				"available %s of user %q (balance %s, of which %s held) does not cover %s", running.Available(), m.UserID, running.Balance, running.Held, m.Amount)
		}
		return Hold{}, Errorf(KindFailedPrecondition, ReasonInsufficientBalance,
			"balance %s of user %q does not cover %s", running.Balance, m.UserID, m.Amount)
	}
	// Pending points count: they reach the balance by themselves.
	if !m.ExplainBalance && running.Balance.Add(running.Pending).Add(m.Delta()).GreaterThan(MaxBalance) {
		return Hold{}, Errorf(KindFailedPrecondition, ReasonBalanceLimit, "the balance would exceed %s", MaxBalance)
	}
	if err := checkBudget(m, f); err != nil {
		return Hold{}, err
	}
	if m.Type == EntryHold && len(running.Holds) >= cmp.Or(f.MaxHolds, DefaultMaxHolds) {
		return Hold{}, Errorf(KindFailedPrecondition, ReasonTooManyHolds,
			"user %q has %d open holds, as many as allowed: capture or void one first", m.UserID, len(running.Holds))
	}
	if !m.Effective.IsZero() {
		if err := checkPending(running, m, f); err != nil {
			return Hold{}, err
		}
	}
	return hold, nil
}

// checkPending refuses a pending grant beyond the account's bounds: its
// pending grants, and the expiry times its buckets would hold once
// everything pending matured (a maturation is never refused, so the bound
// is kept when the grant is made).
func checkPending(running Account, m Mutation, f Facts) error {
	if maxPending := cmp.Or(f.MaxPending, DefaultMaxPending); len(running.PendingLots) >= maxPending {
		return Errorf(KindFailedPrecondition, ReasonTooManyPending,
			"user %q has %d pending grants, as many as allowed: grant without an effective time, or wait for one to mature", m.UserID, len(running.PendingLots))
	}
	if maxBuckets := cmp.Or(f.MaxBuckets, DefaultMaxBuckets); running.expiryTimes(m.Kind, m.Expire) > maxBuckets {
		return Errorf(KindFailedPrecondition, ReasonTooManyBuckets,
			"user %q would hold points of more than the %d expiry times allowed once its pending grants mature: grant with an expiry the user already has, or none", m.UserID, maxBuckets)
	}
	return nil
}

// checkExplanation refuses an adjustment that explains the balance unless
// the account exists and its balance is still the one the request
// explains, unmoved by an expiration before it.
func checkExplanation(running Account, m Mutation, f Facts, expired bool) error {
	if running.Version == 0 {
		return Errorf(KindNotFound, ReasonAccountNotFound, "user %q has no account", m.UserID)
	}
	if !running.Balance.Equal(m.ExpectedBalance) {
		return balanceMoved(m, running)
	}
	if expired {
		// The expiration moved the balance the request explains.
		return balanceMoved(m, running)
	}
	return CheckExplains(m, running, f.EntriesSum)
}

// entryOf is m's own entry, the next after running at time at, without
// its balance and held after: what it draws from which bucket, or gives
// back (a refund of purchase), and what it holds or releases (a capture
// or void of hold).
func entryOf(m Mutation, running Account, at time.Time, purchase *PurchaseRef, hold Hold, kinds Kinds) (Entry, error) {
	info, _ := m.Type.Info()
	e := Entry{
		UserID:            m.UserID,
		Version:           running.Version + 1,
		Type:              m.Type,
		Amount:            m.Delta(),
		RequestID:         m.RequestID,
		OrderID:           m.OrderID,
		CreateTime:        at,
		Metadata:          m.Metadata,
		PurchaseRequestID: m.PurchaseRequestID,
		Reason:            m.Reason,
		ExplainsBalance:   m.ExplainBalance,
		HoldRequestID:     m.HoldRequestID,
		BudgetID:          m.BudgetID,
		MerchantID:        m.MerchantID,
		Category:          m.Category,
	}
	switch {
	case purchase != nil:
		e.PurchaseVersion = purchase.Version
		e.Draws = giveBack(purchase.Draws, purchase.Refunded, m.Amount)
	case m.Type == EntryHold:
		if !live(m.Expire, at) {
			return Entry{}, Errorf(KindFailedPrecondition, ReasonInvalidExpiry,
				"expire_time %s is not after the time of this hold, %s", m.Expire.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
		e.ExpireTime = m.Expire.UTC()
		e.HeldChange = m.Amount
		e.Draws = spend(kinds.Eligible(running.Buckets, m.MerchantID, m.Category), m.Amount)
	case m.Type == EntryCapture:
		captured := m.Amount
		if captured.IsZero() { // none asked: all of it
			captured = hold.Amount
		}
		if captured.GreaterThan(hold.Amount) {
			return Entry{}, Errorf(KindFailedPrecondition, ReasonCaptureExceedsHold,
				"capture of %s exceeds hold %q of %s", captured, hold.RequestID, hold.Amount)
		}
		e.Amount = captured.Neg()
		e.HeldChange = hold.Amount.Neg()
		e.Draws = captureDraws(hold.Draws, captured)
		e.OrderID = cmp.Or(e.OrderID, hold.OrderID)
		e.MerchantID, e.Category = hold.MerchantID, hold.Category
	case m.Type == EntryRelease:
		e.Reason = ReleaseVoided
		e.HeldChange = hold.Amount.Neg()
		e.Draws = hold.Draws
		e.OrderID = cmp.Or(e.OrderID, hold.OrderID)
	case info.RefersToGrant: // reversalOf decides what it takes
	case m.SpendsWhere(): // a purchase
		e.Draws = spend(kinds.Eligible(running.Buckets, m.MerchantID, m.Category), m.Amount)
	case e.Amount.IsNegative(): // a debit adjustment: any kind, in spending order
		e.Draws = spend(kinds.SpendingOrder(slices.Clone(running.Buckets)), m.Amount)
	case info.Expires:
		if !m.Expire.IsZero() && !live(m.Expire, at) {
			return Entry{}, Errorf(KindFailedPrecondition, ReasonInvalidExpiry,
				"expire_time %s is not after the time of this entry, %s", m.Expire.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
		e.ExpireTime = m.Expire.UTC()
		e.Kind = m.Kind
		if !m.Effective.IsZero() {
			// Pending until its effective time; one at or before this
			// entry's time matures right after it (Decide).
			e.Amount, e.PendingChange, e.EffectiveTime = decimal.Zero, m.Amount, m.Effective.UTC()
		}
	}
	return e, nil
}

// reversalOf is the reversal e of the grant m names, as running has it:
// what is still pending of the grant first, then spendable points, drawn
// soonest expiry first; or the refusal: no such grant, more than is left
// of it, less available than the spendable part, or, for a grant from a
// budget, more than the user has left to give back to it (budget). A
// reversal of a grant from a budget names the budget: it gives back all
// it takes, pending or spendable, as a debit adjustment naming it does.
func reversalOf(e Entry, m Mutation, running Account, grant *GrantRef, budget *BudgetRef) (Entry, error) {
	if grant == nil || grant.Type != EntryGrant {
		return Entry{}, Errorf(KindNotFound, ReasonGrantNotFound, "user %q has no grant with request_id %q", m.UserID, m.GrantRequestID)
	}
	left := grant.Amount.Sub(grant.Reversed)
	amount := m.Amount
	if amount.IsZero() { // none asked: all that is left
		amount = left
	}
	if !amount.IsPositive() || amount.GreaterThan(left) {
		return Entry{}, Errorf(KindFailedPrecondition, ReasonReversalExceedsGrant,
			"reversal of %s exceeds what is left of grant %q: %s of %s already reversed", amount, m.GrantRequestID, grant.Reversed, grant.Amount)
	}
	pending := decimal.Zero
	if lot, ok := running.Lot(m.GrantRequestID); ok {
		pending = decimal.Min(amount, lot.Amount)
	}
	spent := amount.Sub(pending)
	// Only points of the grant's kind are taken back.
	own := ofKind(running.Buckets, grant.Kind)
	if available := bucketSum(own); spent.GreaterThan(available) {
		return Entry{}, Errorf(KindFailedPrecondition, ReasonInsufficientBalance,
			"available %s of kind %q of user %q does not cover the %s of grant %q already spendable", available, KindName(grant.Kind), m.UserID, spent, m.GrantRequestID)
	}
	if grant.BudgetID != "" {
		if err := checkGiveBack(m.UserID, grant.BudgetID, amount, budget); err != nil {
			return Entry{}, err
		}
	}
	e.Amount, e.PendingChange = spent.Neg(), pending.Neg()
	e.Draws = spend(own, spent)
	e.GrantRequestID, e.GrantVersion = m.GrantRequestID, grant.Version
	e.BudgetID = grant.BudgetID
	return e, nil
}

// DecideExpiry is what the sweeper asks: the maturations of acct's pending
// grants, the releases of its holds and the expiration of its buckets due
// at now, if any, and the account after.
func DecideExpiry(acct Account, now time.Time) Decision {
	return DecideExpiryUpTo(acct, now, -1)
}

// DecideExpiryUpTo is DecideExpiry for a store that writes a bounded number
// of entries at once: it writes at most n maturations and releases (the
// maturations first, then the oldest holds; n < 0: all of them), and
// expires the buckets only once none is left due, since both put points
// in buckets. Decided again on the
// account after, until it decides nothing, it writes what DecideExpiry
// writes at once.
func DecideExpiryUpTo(acct Account, now time.Time, n int) Decision {
	d := Decision{Main: -1}
	d.After = acct.expireUpTo(Time(acct, now), n, &d.Entries)
	return d
}

// expire appends to entries a maturation of each pending lot due at t, a
// release of each hold that has expired at t, then an expiration of the account's buckets that have expired at t (with
// what those releases gave back to them), and returns the account after.
func (a Account) expire(t time.Time, entries *[]Entry) Account {
	return a.expireUpTo(t, -1, entries)
}

// expireUpTo is expire that writes at most n maturations and releases
// (n < 0: all), and expires the buckets only if it wrote every one due:
// maturations put points in buckets that may have expired, and releases
// give back to them.
func (a Account) expireUpTo(t time.Time, n int, entries *[]Entry) Account {
	for _, l := range a.dueLots(t) {
		if n == 0 {
			return a
		}
		n--
		e := Entry{
			UserID:         a.UserID,
			Version:        a.Version + 1,
			Type:           EntryMaturation,
			Amount:         l.Amount,
			CreateTime:     t,
			PendingChange:  l.Amount.Neg(),
			EffectiveTime:  l.EffectiveTime,
			ExpireTime:     l.ExpireTime,
			GrantRequestID: l.GrantRequestID,
			GrantVersion:   l.Version,
			Kind:           l.Kind,
		}
		a = a.Apply(e)
		e.BalanceAfter, e.HeldAfter, e.PendingAfter = a.Balance, a.Held, a.Pending
		*entries = append(*entries, e)
	}
	for _, h := range a.Holds {
		if live(h.ExpireTime, t) {
			continue
		}
		if n == 0 {
			return a // more are due: the buckets wait for them
		}
		n--
		e := Entry{
			UserID:        a.UserID,
			Version:       a.Version + 1,
			Type:          EntryRelease,
			OrderID:       h.OrderID,
			CreateTime:    t,
			Reason:        ReleaseExpired,
			HeldChange:    h.Amount.Neg(),
			Draws:         h.Draws,
			HoldRequestID: h.RequestID,
		}
		a = a.Apply(e)
		e.BalanceAfter, e.HeldAfter, e.PendingAfter = a.Balance, a.Held, a.Pending
		*entries = append(*entries, e)
	}
	draws := a.expired(t)
	if len(draws) == 0 {
		return a
	}
	e := Entry{
		UserID:     a.UserID,
		Version:    a.Version + 1,
		Type:       EntryExpiration,
		Amount:     sum(draws).Neg(),
		CreateTime: t,
		Draws:      draws,
	}
	after := a.Apply(e)
	e.BalanceAfter, e.HeldAfter, e.PendingAfter = after.Balance, after.Held, after.Pending
	*entries = append(*entries, e)
	return after
}

// Refundable says whether a refund may name an entry of type t (a purchase
// or a capture).
func (t EntryType) Refundable() bool {
	info, _ := t.Info()
	return info.Refundable
}

// openHold is the open hold m resolves, in the account as it is at m's
// time (running), or the refusal: acct held it but it expired by then,
// its record says it resolved, or there is none.
func openHold(acct, running Account, m Mutation, rec *HoldRef) (Hold, error) {
	if h, ok := running.Hold(m.HoldRequestID); ok {
		return h, nil
	}
	if _, ok := acct.Hold(m.HoldRequestID); ok {
		return Hold{}, holdExpired(m)
	}
	switch {
	case rec == nil || rec.State == HoldHeld:
		// HELD on record but not open in the account: the account was read
		// before the hold committed; the store's condition on the account
		// refuses to record this refusal, and it decides again.
		return Hold{}, Errorf(KindNotFound, ReasonHoldNotFound, "user %q has no hold with request_id %q", m.UserID, m.HoldRequestID)
	case rec.State == HoldExpired:
		return Hold{}, holdExpired(m)
	}
	return Hold{}, Errorf(KindFailedPrecondition, ReasonHoldNotHeld, "hold %q of user %q is already %s", m.HoldRequestID, m.UserID, rec.State)
}

func holdExpired(m Mutation) error {
	return Errorf(KindFailedPrecondition, ReasonHoldExpired, "hold %q of user %q has expired: its points went back to the balance", m.HoldRequestID, m.UserID)
}

func balanceMoved(m Mutation, acct Account) error {
	return Errorf(KindFailedPrecondition, ReasonBalanceMoved,
		"balance of user %q is %s, not the expected %s: reconcile again", m.UserID, acct.Balance, m.ExpectedBalance)
}

// Totals are an account's running sums by kind of entry.
type Totals struct {
	Granted  decimal.Decimal
	Spent    decimal.Decimal // positive
	Refunded decimal.Decimal
	Adjusted decimal.Decimal // net
	Expired  decimal.Decimal // positive
}

// Add is t with e counted in the total its type feeds.
func (t Totals) Add(e Entry) Totals {
	info, _ := e.Type.Info()
	switch info.Total {
	case TotalGranted:
		t.Granted = t.Granted.Add(e.Amount)
	case TotalSpent:
		t.Spent = t.Spent.Sub(e.Amount)
	case TotalRefunded:
		t.Refunded = t.Refunded.Add(e.Amount)
	case TotalAdjusted:
		t.Adjusted = t.Adjusted.Add(e.Amount)
	case TotalExpired:
		t.Expired = t.Expired.Sub(e.Amount)
	}
	return t
}

// Plus is the sums of t and o together (of several users, say).
func (t Totals) Plus(o Totals) Totals {
	return Totals{Granted: t.Granted.Add(o.Granted), Spent: t.Spent.Add(o.Spent), Refunded: t.Refunded.Add(o.Refunded),
		Adjusted: t.Adjusted.Add(o.Adjusted), Expired: t.Expired.Add(o.Expired)}
}

// Equal says whether t and o hold the same sums.
func (t Totals) Equal(o Totals) bool {
	return t.Granted.Equal(o.Granted) && t.Spent.Equal(o.Spent) && t.Refunded.Equal(o.Refunded) &&
		t.Adjusted.Equal(o.Adjusted) && t.Expired.Equal(o.Expired)
}

func (t Totals) String() string {
	return fmt.Sprintf("granted %s spent %s refunded %s adjusted %s expired %s", t.Granted, t.Spent, t.Refunded, t.Adjusted, t.Expired)
}
