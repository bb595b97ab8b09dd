package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
)

// book remembers every mutation sent to ledgerd and what came back, to
// check afterwards that each acknowledged request was applied exactly once
// and each unacknowledged one at most once.
type book struct {
	mu     sync.Mutex
	sent   map[string]*sentRequest // by request id
	probes []string                // probes answered otherwise than expected
}

type sentRequest struct {
	op      op
	acks    int
	entries map[string]bool // entry ids the acknowledgements named
	codes   map[string]int
}

func newBook() *book { return &book{sent: map[string]*sentRequest{}} }

func (b *book) sending(o op) {
	if b == nil || !o.mutates() || o.expect != "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sent[o.requestID]; !ok {
		b.sent[o.requestID] = &sentRequest{op: o, entries: map[string]bool{}, codes: map[string]int{}}
	}
}

func (b *book) answered(o op, out outcome) {
	if b == nil || !o.mutates() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sent[o.requestID]
	if o.expect != "" {
		switch {
		case out.code == o.expect, transient[out.code]: // transient: the ledger was busy, not an answer about the id
			return
		case out.code == "ok" && s != nil && s.acks == 0:
			// The request it re-uses was never acknowledged (it failed, or
			// is still in flight): the probe may be the one applied, and is
			// the request the ledger must now hold exactly once.
			s.op, s.op.expect = o, ""
		default:
			b.probes = append(b.probes, fmt.Sprintf("request %s re-sent with amount %s: answered %s, want %s", o.requestID, o.amount, out.code, o.expect))
			return
		}
	}
	s.codes[out.code]++
	if out.code == "ok" {
		s.acks++
		s.entries[out.entryID] = true
	}
}

// users are the users the book sent requests for.
func (b *book) users() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range b.sent {
		seen[s.op.user] = true
	}
	return sortedKeys(seen)
}

// transient are the codes a busy ledger may answer any request with.
var transient = map[string]bool{"aborted": true, "unavailable": true, "deadline_exceeded": true, "canceled": true, "resource_exhausted": true}

// checker checks the invariants of the ledger tables after a run.
type checker struct {
	store   *dynamo.Ledger
	history *projection.History
	leases  *projection.LeaseTable
	// api, if set, is ledgerd, whose view of every user's holds is checked
	// too (checkHolds).
	api pointledgerv1connect.LedgerServiceClient
}

// check runs every invariant over the users the book knows: reconciliation
// (fold = aggregate, versions, request records, refund caps, no negative
// balance, history = ledger, sum of entries = sum of balances), then the
// book against the entries (exactly once), conservation, and the
// double-spend rounds' limits.
func (c *checker) check(ctx context.Context, b *book, covers map[string]int) (Invariants, error) {
	inv := Invariants{Checked: []string{
		"reconciliation of every user: aggregate = fold of entries, versions 1..N, one request record per entry, refunds within their purchases, no negative balance",
		"history = ledger for every user (after the projection catches up)",
		"sum of all entries = sum of all balances",
		"every acknowledged request is exactly one entry (same type, amount and entry id as acknowledged); every unacknowledged one at most one; no entry the load test did not ask for",
		"conservation over the load test's users: granted - spent + refunded - expired = sum of balances",
	}}
	if len(covers) > 0 {
		inv.Checked = append(inv.Checked, "double-spend rounds: acknowledged purchases <= what the grant covers")
	}
	if c.api != nil {
		inv.Checked = append(inv.Checked, holdsChecked...)
	}
	rep, err := reconcile.New(c.store, c.history, c.leases).Run(ctx, reconcile.Options{ProjectionGrace: time.Minute})
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
		byUser[s.op.user] = append(byUser[s.op.user], s)
	}
	var totals ledger.Totals // the ledger's own fold of every entry
	var balances decimal.Decimal
	users := sortedKeys(byUser)
	for _, user := range users {
		entries, err := c.store.EntriesAfter(ctx, user, 0, math.MaxInt) // all of them
		if err != nil {
			return inv, err
		}
		acct, err := c.store.Balance(ctx, user)
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
		totals = totals.Plus(t)
		purchases := matchBook(&inv, user, byUser[user], entries)
		if k, ok := covers[user]; ok && purchases > k {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: double spend: %d purchases committed, the grant covered %d", user, purchases, k))
		}
		if c.api != nil {
			v, err := readHoldsView(ctx, c.api, user)
			if err != nil {
				return inv, err
			}
			inv.Violations = append(inv.Violations, checkHolds(v, byUser[user])...)
			inv.countHolds(v.holds)
		}
	}
	granted, spent, refunded, expired := totals.Granted, totals.Spent, totals.Refunded, totals.Expired
	inv.Granted, inv.Spent, inv.Refunded, inv.Expired, inv.Balances = granted.String(), spent.String(), refunded.String(), expired.String(), balances.String()
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
func matchBook(inv *Invariants, user string, sent []*sentRequest, entries []ledger.Entry) (purchases int) {
	byRequest := map[string][]ledger.Entry{}
	for _, e := range entries {
		if !e.System() { // no request asked for it
			byRequest[e.RequestID] = append(byRequest[e.RequestID], e)
		}
	}
	for _, s := range sent {
		es := byRequest[s.op.requestID]
		delete(byRequest, s.op.requestID)
		if s.acks > 0 {
			inv.Acked++
		} else {
			inv.Unacked++
		}
		switch {
		case s.acks > 0 && len(es) != 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: acknowledged request %s has %d entries", user, s.op.requestID, len(es)))
		case len(es) > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: request %s (not acknowledged: %v) has %d entries", user, s.op.requestID, s.codes, len(es)))
		case len(es) == 1:
			e := es[0]
			if e.Type != entryTypeOf[s.op.kind] || !moved(e).Equal(s.op.amount) {
				inv.Violations = append(inv.Violations, fmt.Sprintf("%s: request %s was a %s of %s, its entry a %s of %s", user, s.op.requestID, s.op.kind, s.op.amount, e.Type, moved(e)))
			}
			// An Authorize is answered with its hold, not an entry: there is
			// no entry id to compare.
			if s.acks > 0 && s.op.kind != "authorize" && (len(s.entries) != 1 || !s.entries[e.ID]) {
				inv.Violations = append(inv.Violations, fmt.Sprintf("%s: request %s acknowledged with entries %v, its entry is %s", user, s.op.requestID, sortedKeys(s.entries), e.ID))
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

// entryTypeOf is the entry each kind of op the load test sends asks for.
var entryTypeOf = map[string]ledger.EntryType{
	"grant": ledger.EntryGrant, "purchase": ledger.EntryPurchase, "refund": ledger.EntryRefund,
	"authorize": ledger.EntryHold, "capture": ledger.EntryCapture, "void": ledger.EntryRelease,
}

// moved is what an entry moved, as its request named it: the points held
// or released for a hold or a release (their amount is 0), else the
// change to the balance.
func moved(e ledger.Entry) decimal.Decimal {
	if info, _ := e.Type.Info(); info.NoAmount {
		return e.HeldChange.Abs()
	}
	return e.Amount.Abs()
}
