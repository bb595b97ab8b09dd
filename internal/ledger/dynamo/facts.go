package dynamo

import (
	"context"
	"fmt"
	"math"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Reading the facts a mutation is decided on (the first step of the write
// path, see write.go): what ledger.Decide needs beyond the account, read
// consistently, and where the group must end before the mutation.

// step is what planning does with a call once its facts are read.
type step int

const (
	decide    step = iota // decide it on its facts
	answered              // its facts could not be read: it has its answer, the error
	nextGroup             // it waits for the next group (see facts)
	readAgain             // the account is behind another writer's: read it and plan again
)

// facts reads what the domain decides c's mutation (of type info) on,
// beyond the account t planned so far: a refund's purchase, a reversal's
// grant (and the budget it gives back to), a grant's budget, the record of
// a hold a capture or void names that the account does not hold open, the
// sum of the entries an explaining adjustment explains. For a refund it
// returns too the purchase's request record, which the purchase's update
// is conditioned on. It says whether c is decided now or must wait; a read
// that fails answers c with its error.
func (l *Ledger) facts(ctx context.Context, t *txn, c *call, info ledger.EntryTypeInfo, seen *seen) (ledger.Facts, requestRecord, step) {
	facts := ledger.Facts{MaxBuckets: l.maxBuckets, MaxHolds: l.maxHolds, MaxPending: l.maxPending}
	var purchase requestRecord
	next := decide
	var err error
	if info.RefersToPurchase {
		facts.Purchase, purchase, next, err = l.purchaseFacts(ctx, t, c.m, seen)
	}
	if info.RefersToGrant {
		facts.Grant, purchase, next, err = l.grantFacts(ctx, t, c.m, seen)
	}
	if info.ResolvesHold && next == decide && err == nil {
		facts.Hold, next, err = l.holdFacts(ctx, t, c.m, seen)
	}
	budget := c.m.BudgetID
	if facts.Grant != nil && budget == "" { // a reversal gives back to its grant's budget
		budget = facts.Grant.BudgetID
	}
	if budget != "" && next == decide && err == nil {
		facts.Budget, next, err = l.budgetFacts(ctx, t, c.m, budget)
	}
	if next == decide && err == nil {
		facts.Kinds, err = l.kindsFor(ctx, t.running, c.m)
	}
	if c.m.ExplainBalance && t.running.Version > 0 && next == decide && err == nil {
		// It explains the balance the group starts from: the entries it
		// must add up with are those the account counts.
		if len(t.members) > 0 {
			next = nextGroup
		} else {
			facts.EntriesSum, err = l.foldTo(ctx, c, t.running.Version)
		}
	}
	if err != nil {
		c.finish(ledger.Result{}, err)
		return facts, purchase, answered
	}
	return facts, purchase, next
}

// purchaseFacts reads the purchase a refund m names, as ledger.Facts has
// it, and its request record. A refund waits for the next group if its
// purchase commits in this one, or another refund of it does (a
// transaction updates an item once); and the account is read again if the
// purchase is newer than it.
func (l *Ledger) purchaseFacts(ctx context.Context, t *txn, m ledger.Mutation, seen *seen) (*ledger.PurchaseRef, requestRecord, step, error) {
	rec, ok := seen.purchases[m.PurchaseRequestID]
	if !ok {
		found := false
		var err error
		if rec, found, err = l.request(ctx, m.UserID, m.PurchaseRequestID); err != nil {
			return nil, requestRecord{}, answered, err
		}
		// A refused request wrote no entry: there is nothing to refund.
		if ok = found && rec.Refusal == nil; ok {
			setIn(&seen.purchases, m.PurchaseRequestID, rec)
		}
	}
	if p, inGroup := t.byRequest[m.PurchaseRequestID]; !ok && inGroup && p.entry.Type.Refundable() {
		return nil, requestRecord{}, nextGroup, nil // its purchase commits in this group: refund it in the next
	}
	switch {
	case !ok:
		return nil, requestRecord{}, decide, nil // no purchase: the domain refuses it
	case !rec.Type.Refundable():
		return &ledger.PurchaseRef{Version: rec.Version, Type: rec.Type}, requestRecord{}, decide, nil // not a purchase: the domain refuses it
	case t.touched[rec.Version]:
		return nil, requestRecord{}, nextGroup, nil // one update of the purchase per transaction
	case rec.Version > t.before.Version:
		return nil, requestRecord{}, readAgain, nil
	}
	// What it drew and what earlier refunds gave back decide where this
	// refund goes, and whether it fits; the purchase's update is
	// conditioned on the refunded amount read here.
	pe, found, err := l.entry(ctx, m.UserID, rec.Version)
	if err == nil && !found {
		err = fmt.Errorf("purchase %q of %q: entry version %d not found", m.PurchaseRequestID, m.UserID, rec.Version)
	}
	if err != nil {
		return nil, requestRecord{}, answered, err
	}
	// The entry says what was spent: a capture's request may have asked
	// for all of its hold, and named no amount.
	rec.Amount, rec.Refunded = pe.Amount.Neg(), pe.RefundedAmount
	return &ledger.PurchaseRef{Version: rec.Version, Type: rec.Type, Amount: rec.Amount, Draws: pe.Draws, Refunded: pe.RefundedAmount}, rec, decide, nil
}

// grantFacts reads the grant a reversal m names, as ledger.Facts has it,
// and its request record with the reversed amount read, which the grant's
// update is conditioned on; as purchaseFacts does a refund's purchase.
func (l *Ledger) grantFacts(ctx context.Context, t *txn, m ledger.Mutation, seen *seen) (*ledger.GrantRef, requestRecord, step, error) {
	rec, ok := seen.grants[m.GrantRequestID]
	if !ok {
		found := false
		var err error
		if rec, found, err = l.request(ctx, m.UserID, m.GrantRequestID); err != nil {
			return nil, requestRecord{}, answered, err
		}
		if ok = found && rec.Refusal == nil; ok {
			setIn(&seen.grants, m.GrantRequestID, rec)
		}
	}
	if g, inGroup := t.byRequest[m.GrantRequestID]; !ok && inGroup && g.entry.Type == ledger.EntryGrant {
		return nil, requestRecord{}, nextGroup, nil // its grant commits in this group: reverse it in the next
	}
	switch {
	case !ok:
		return nil, requestRecord{}, decide, nil // no grant: the domain refuses it
	case rec.Type != ledger.EntryGrant:
		return &ledger.GrantRef{Version: rec.Version, Type: rec.Type}, requestRecord{}, decide, nil // the domain refuses it
	case t.touched[rec.Version]:
		return nil, requestRecord{}, nextGroup, nil // one update of the grant per transaction
	case rec.Version > t.before.Version:
		return nil, requestRecord{}, readAgain, nil
	}
	ge, found, err := l.entry(ctx, m.UserID, rec.Version)
	if err == nil && !found {
		err = fmt.Errorf("grant %q of %q: entry version %d not found", m.GrantRequestID, m.UserID, rec.Version)
	}
	if err != nil {
		return nil, requestRecord{}, answered, err
	}
	rec.Amount, rec.Reversed = ge.Amount.Add(ge.PendingChange), ge.ReversedAmount
	return &ledger.GrantRef{Version: rec.Version, Type: rec.Type, Amount: rec.Amount, Reversed: rec.Reversed, BudgetID: ge.BudgetID, Kind: ge.Kind}, rec, decide, nil
}

// holdFacts reads the state of the hold a capture or void m names, as
// ledger.Facts has it: nil while the account holds it open, or if the
// user made no hold of it. It waits for the next group if its hold is made
// in this one (a transaction writes a hold's record once); and the account
// is read again if the hold is newer than it.
func (l *Ledger) holdFacts(ctx context.Context, t *txn, m ledger.Mutation, seen *seen) (*ledger.HoldRef, step, error) {
	id := m.HoldRequestID
	switch st, resolved := t.holds.resolved[id]; {
	case t.holds.made[id]:
		return nil, nextGroup, nil
	case resolved:
		return &ledger.HoldRef{State: st}, decide, nil // as its group leaves it
	case isOpen(t.running, id):
		return nil, decide, nil
	case seen.resolved[id] != "":
		return &ledger.HoldRef{State: seen.resolved[id]}, decide, nil
	}
	// Not open: its record says whether it resolved or never was.
	h, found, err := l.holdByRequest(ctx, m.UserID, id)
	switch {
	case err != nil:
		return nil, answered, err
	case !found:
		return nil, decide, nil
	case h.Version > t.before.Version:
		return nil, readAgain, nil // made by another writer since the account was read
	}
	if h.State != ledger.HoldHeld {
		setIn(&seen.resolved, id, h.State)
	}
	return &ledger.HoldRef{State: h.State}, decide, nil
}

// seen is what a commit read that stays true while it tries its groups
// again: request records of refunds' purchases (records never change) and
// the states of resolved holds (a hold resolves once). Its maps are made
// when first written (setIn): most commits read none of these.
type seen struct {
	purchases map[string]requestRecord
	grants    map[string]requestRecord // reversals' grants
	resolved  map[string]ledger.HoldState
}

func isOpen(acct ledger.Account, holdRequestID string) bool {
	_, ok := acct.Hold(holdRequestID)
	return ok
}

// fold is the sum of a user's entries up to a version.
type fold struct {
	version int64
	sum     decimal.Decimal
}

// foldTo returns the sum of c's user's entries up to version, read
// consistently; a retry of c reads only the entries it has not summed.
func (l *Ledger) foldTo(ctx context.Context, c *call, version int64) (decimal.Decimal, error) {
	if c.fold == nil || c.fold.version > version {
		c.fold = &fold{}
	}
	if c.fold.version < version {
		entries, err := l.EntriesAfter(ctx, c.m.UserID, c.fold.version, int(min(version-c.fold.version, math.MaxInt32)))
		if err != nil {
			return decimal.Decimal{}, fmt.Errorf("sum the entries an adjustment explains: %w", err)
		}
		for _, e := range entries {
			c.fold.sum = c.fold.sum.Add(e.Amount)
			c.fold.version = e.Version
		}
		if c.fold.version != version {
			return decimal.Decimal{}, fmt.Errorf("sum the entries of %q to version %d: the ledger has entries to %d only", c.m.UserID, version, c.fold.version)
		}
	}
	return c.fold.sum, nil
}
