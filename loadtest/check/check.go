// Package check checks the ledger after a load test's run: every request
// the run sent against the entries it made, conservation, double spends,
// the holds as ledgerd shows them, and reconciliation.
package check

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/reconcile"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// Ledger is what the checks read of the ledger's tables (a
// *dynamo.Ledger on the run's tables).
type Ledger interface {
	Balance(ctx context.Context, user string) (ledger.Account, error)
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error)
}

// Reconciler reconciles every user of the run's tables (a
// *reconcile.Reconciler on them).
type Reconciler interface {
	Run(ctx context.Context, o reconcile.Options) (reconcile.Report, error)
}

// Checker checks the invariants of the ledger tables after a run.
type Checker struct {
	Ledger     Ledger
	Reconciler Reconciler
	// API, if set, is ledgerd, whose view of every user's holds is checked
	// too (checkHolds).
	API pointledgerv1connect.LedgerServiceClient
}

// Check runs every invariant over the users the book knows: reconciliation
// (fold = aggregate, versions, request records, refund caps, no negative
// balance, history = ledger, sum of entries = sum of balances), then the
// book against the entries (exactly once), conservation, pending points,
// and the double-spend rounds' limits.
func (c *Checker) Check(ctx context.Context, b *Book, covers map[string]int) (report.Invariants, error) {
	inv := report.Invariants{Checked: []string{
		"reconciliation of every user: aggregate = fold of entries, versions 1..N, one request record per entry, refunds within their purchases, no negative balance",
		"history = ledger for every user (after the projection catches up)",
		"sum of all entries = sum of all balances",
		"every acknowledged request is exactly one entry (same type, amount and entry id as acknowledged); every unacknowledged one at most one; no entry the load test did not ask for",
		"conservation over the load test's users: granted - spent + refunded - expired = sum of balances",
		pendingChecked,
	}}
	if len(covers) > 0 {
		inv.Checked = append(inv.Checked, "double-spend rounds: acknowledged purchases <= what the grant covers")
	}
	if c.API != nil {
		inv.Checked = append(inv.Checked, holdsChecked...)
	}
	rep, err := c.Reconciler.Run(ctx, reconcile.Options{ProjectionGrace: time.Minute})
	if err != nil {
		return inv, fmt.Errorf("reconcile: %w", err)
	}
	for _, f := range rep.Findings {
		inv.Violations = append(inv.Violations, "reconcile: "+f.String())
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	inv.Violations = append(inv.Violations, b.probes...)
	byUser := map[string][]*sentRequest{}
	for _, s := range b.sent {
		byUser[s.op.User] = append(byUser[s.op.User], s)
	}
	var totals ledger.Totals // the ledger's own fold of every entry
	var balances, pending decimal.Decimal
	users := slices.Sorted(maps.Keys(byUser))
	for _, user := range users {
		entries, err := c.Ledger.EntriesAfter(ctx, user, 0, math.MaxInt) // all of them
		if err != nil {
			return inv, err
		}
		acct, err := c.Ledger.Balance(ctx, user)
		if err != nil {
			return inv, err
		}
		inv.Users++
		inv.Entries += int64(len(entries))
		balances = balances.Add(acct.Balance)
		if acct.Balance.IsNegative() {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: negative balance %s", user, acct.Balance))
		}
		folded, t, err := ledger.Fold(user, entries)
		if err != nil {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: %v", user, err))
		}
		if !folded.Balance.Equal(acct.Balance) {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: balance %s, its entries fold to %s", user, acct.Balance, folded.Balance))
		}
		inv.Violations = append(inv.Violations, checkPending(user, acct, folded, entries, &inv.Returns)...)
		pending = pending.Add(acct.Pending)
		totals = totals.Plus(t)
		purchases := matchBook(&inv, user, byUser[user], entries)
		if k, ok := covers[user]; ok && purchases > k {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: double spend: %d purchases committed, the grant covered %d", user, purchases, k))
		}
		if c.API != nil {
			v, err := readHoldsView(ctx, c.API, user)
			if err != nil {
				return inv, err
			}
			inv.Violations = append(inv.Violations, checkHolds(v, byUser[user])...)
			inv.CountHolds(v.holds)
		}
	}
	granted, spent, refunded, expired := totals.Granted, totals.Spent, totals.Refunded, totals.Expired
	inv.Granted, inv.Spent, inv.Refunded, inv.Expired, inv.Balances = granted.String(), spent.String(), refunded.String(), expired.String(), balances.String()
	inv.Pending = pending.String()
	if !granted.Sub(spent).Add(refunded).Add(totals.Adjusted).Sub(expired).Equal(balances) {
		inv.Violations = append(inv.Violations, fmt.Sprintf("conservation: granted %s - spent %s + refunded %s - expired %s != sum of balances %s", granted, spent, refunded, expired, balances))
	}
	slices.Sort(inv.Violations)
	return inv, nil
}

// matchBook checks one user's entries against the requests the book sent
// for them: an acknowledged request is exactly one entry, the one
// acknowledged; an unacknowledged one at most one; and no entry is of a
// request never sent. It counts the requests into inv and returns the
// purchases committed.
func matchBook(inv *report.Invariants, user string, sent []*sentRequest, entries []ledger.Entry) (purchases int) {
	byRequest := map[string][]ledger.Entry{}
	for _, e := range entries {
		if !e.System() { // no request asked for it
			byRequest[e.RequestID] = append(byRequest[e.RequestID], e)
		}
	}
	for _, s := range sent {
		es := byRequest[s.op.RequestID]
		delete(byRequest, s.op.RequestID)
		if s.acks > 0 {
			inv.Acked++
		} else {
			inv.Unacked++
		}
		switch {
		case s.acks > 0 && len(es) != 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: acknowledged request %s has %d entries", user, s.op.RequestID, len(es)))
		case len(es) > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: request %s (not acknowledged: %v) has %d entries", user, s.op.RequestID, s.codes, len(es)))
		case len(es) == 1:
			e := es[0]
			asked, _ := s.op.EntryType()
			if e.Type != asked || !moved(e).Equal(s.op.Amount) {
				inv.Violations = append(inv.Violations, fmt.Sprintf("%s: request %s was a %s of %s, its entry a %s of %s", user, s.op.RequestID, s.op.Kind, s.op.Amount, e.Type, moved(e)))
			}
			// An Authorize is answered with its hold, not an entry: there is
			// no entry id to compare.
			if s.acks > 0 && s.op.Kind != "authorize" && (len(s.entries) != 1 || !s.entries[e.ID]) {
				inv.Violations = append(inv.Violations, fmt.Sprintf("%s: request %s acknowledged with entries %v, its entry is %s", user, s.op.RequestID, slices.Sorted(maps.Keys(s.entries)), e.ID))
			}
			if e.Type == ledger.EntryPurchase {
				purchases++
			}
		}
	}
	for rid := range byRequest {
		inv.Violations = append(inv.Violations, fmt.Sprintf("%s: entry of request %s, which the load test never sent", user, rid))
	}
	return purchases
}

// moved is what an entry moved, as its request named it: the points held
// or released for a hold or a release (their amount is 0), else the
// change to the balance and to what is pending (a pending grant moves only
// the latter, a reversal either or both).
func moved(e ledger.Entry) decimal.Decimal {
	if info, _ := e.Type.Info(); info.NoAmount {
		return e.HeldChange.Abs()
	}
	return e.Amount.Abs().Add(e.PendingChange.Abs())
}

// expiryPatience bounds the wait for the ledger to put what expired on the
// record: a few passes of a sweeper at ledgerd's default interval (15 s),
// which a -target may keep.
const expiryPatience = 2 * time.Minute

// ExpiryNote waits for the ledger to put the expired holds and points of
// users on the record (awaitExpiry; read reads a user's account) and says
// how long it took; the checks after it report what is still off the
// record.
func ExpiryNote(ctx context.Context, read func(context.Context, string) (ledger.Account, error), users []string) (string, error) {
	took, pending, err := awaitExpiry(ctx, read, users, expiryPatience)
	if err != nil {
		return "", err
	}
	if len(pending) > 0 {
		return fmt.Sprintf("%d users still had expired holds or points off the record %s after the last hold expired", len(pending), took.Round(time.Second)), nil
	}
	return fmt.Sprintf("every expired hold and point was on the record %s after the last hold had expired", took.Round(100*time.Millisecond)), nil
}

// awaitExpiry waits until nothing of users is due that the ledger has not
// put on the record: every hold released and every bucket expired by
// their expiry, by ledgerd's sweeper (or a later mutation). It first waits
// out drive.HoldTTL, for the holds the run made last, then reads the accounts
// until none has anything due, for at most patience. It returns how long
// the reading took and the users still with something due.
func awaitExpiry(ctx context.Context, read func(context.Context, string) (ledger.Account, error), users []string, patience time.Duration) (time.Duration, []string, error) {
	select {
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-time.After(drive.HoldTTL):
	}
	start := time.Now()
	pending := users
	for {
		var still []string
		for _, u := range pending {
			a, err := read(ctx, u)
			if err != nil {
				return 0, nil, err
			}
			if due(a, time.Now()) {
				still = append(still, u)
			}
		}
		pending = still
		if len(pending) == 0 || time.Since(start) > patience {
			return time.Since(start), pending, nil
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// due says whether a holds a hold or points past their expiry at now,
// which the ledger has yet to put on the record.
func due(a ledger.Account, now time.Time) bool {
	next := a.NextDue()
	return !next.IsZero() && !next.After(now)
}
