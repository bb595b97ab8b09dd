package faulttest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/client"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/migrations"
)

// verdict counts the violations of the invariants, each also a test error.
type verdict struct {
	t *testing.T
	n int
}

func (v *verdict) violate(format string, args ...any) {
	v.t.Helper()
	v.n++
	v.t.Errorf(format, args...)
}

// ledgerView is the ledger as the run left it.
type ledgerView struct {
	byID   map[string]ledger.Entry // user/request_id -> its entry
	counts map[string]int          // user/request_id -> how many entries it has
	holds  map[string]ledger.Hold  // every hold, by user/request_id
	// own counts the entries the ledger writes itself (expirations,
	// maturations, releases of expired holds) by who wrote them (ownBy...).
	own map[string]int
	// entries are each user's entries, in version order, and accounts
	// each user's account as stored.
	entries  map[string][]ledger.Entry
	accounts map[string]ledger.Account
}

// Who wrote an entry of the ledger's own.
const (
	ownByMutation = "with a mutation"
	ownBySweeper  = "by the sweeper"
)

// readLedger reads every entry and hold of users from DynamoDB (not through
// the proxy) and checks each account against the fold of its entries.
func (s *services) readLedger(t *testing.T, users []string, v *verdict) ledgerView {
	view := ledgerView{byID: map[string]ledger.Entry{}, counts: map[string]int{}, holds: map[string]ledger.Hold{}, own: map[string]int{},
		entries: map[string][]ledger.Entry{}, accounts: map[string]ledger.Account{}}
	store := dynamo.New(dynamolocal.NewClient(s.emu.Endpoint), dynamo.Options{Table: migrations.LedgerTable})
	for _, u := range users {
		entries, err := store.EntriesAfter(context.Background(), u, 0, math.MaxInt) // all of them
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range entries {
			if !e.System() {
				view.byID[u+"/"+e.RequestID] = e
				view.counts[u+"/"+e.RequestID]++
				continue
			}
			view.own[ownKind(e)+" "+writtenBy(entries, i)]++
		}
		all := ledger.HoldQuery{Page: ledger.Page{PageSize: ledger.MaxPageSize}, States: []ledger.HoldState{ledger.HoldHeld, ledger.HoldCaptured, ledger.HoldVoided, ledger.HoldExpired}}
		for {
			hs, next, err := store.Holds(context.Background(), u, all)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				view.holds[u+"/"+h.RequestID] = h
			}
			if all.PageToken = next; next == "" {
				break
			}
		}
		acct, err := store.Balance(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		checkAccount(u, acct, entries, v)
		view.entries[u], view.accounts[u] = entries, acct
	}
	return view
}

// ownKind names an entry of the ledger's own for the report.
func ownKind(e ledger.Entry) string {
	if e.Type == ledger.EntryRelease {
		return "RELEASE of an expired hold"
	}
	return string(e.Type)
}

// writtenBy says who wrote entries[i], an entry of the ledger's own: a
// mutation writes its expirations and maturations in its own transaction,
// at its own time, right before its entry (and a pending grant decided at
// or after its effective time its maturation right after it); the sweeper
// writes them alone.
func writtenBy(entries []ledger.Entry, i int) string {
	if e := entries[i]; e.Type == ledger.EntryMaturation && i > 0 && entries[i-1].RequestID == e.GrantRequestID && entries[i-1].CreateTime.Equal(e.CreateTime) {
		return ownByMutation
	}
	for _, e := range entries[i+1:] {
		if !e.System() {
			if e.CreateTime.Equal(entries[i].CreateTime) {
				return ownByMutation
			}
			break
		}
	}
	return ownBySweeper
}

// checkAccount checks a user's account against the fold of its entries
// (reconciliation checked it too; this is the suite's own view): the
// balance, the version, what is held and the open holds that sum to it;
// and every purchase's and capture's refunds against what it spent.
func checkAccount(u string, acct ledger.Account, entries []ledger.Entry, v *verdict) {
	folded, _, err := ledger.Fold(u, entries)
	if err != nil {
		v.violate("%s: the entries do not fold: %v", u, err)
		return
	}
	sum := decimal.Zero
	for _, h := range acct.Holds {
		sum = sum.Add(h.Amount)
	}
	if !acct.Balance.Equal(folded.Balance) || acct.Version != folded.Version || acct.Version != int64(len(entries)) {
		v.violate("%s: balance %s at version %d, the fold of its %d entries %s at version %d", u, acct.Balance, acct.Version, len(entries), folded.Balance, folded.Version)
	}
	if !acct.Held.Equal(sum) || !acct.Held.Equal(folded.Held) || len(acct.Holds) != len(folded.Holds) || acct.Available().IsNegative() {
		v.violate("%s: held %s, its %d open holds sum to %s, the fold holds %s in %d", u, acct.Held, len(acct.Holds), sum, folded.Held, len(folded.Holds))
	}
	if lots := ledger.PendingTotal(acct.PendingLots); !acct.Pending.Equal(lots) || !acct.Pending.Equal(folded.Pending) || !slices.Equal(lotText(acct.PendingLots), lotText(folded.PendingLots)) {
		v.violate("%s: pending %s, its lots %v sum to %s, the fold has %s pending in %v", u, acct.Pending, lotText(acct.PendingLots), lots, folded.Pending, lotText(folded.PendingLots))
	}
	refunded := map[string]decimal.Decimal{}
	for _, e := range entries {
		if e.Type == ledger.EntryRefund {
			refunded[e.PurchaseRequestID] = refunded[e.PurchaseRequestID].Add(e.Amount)
		}
	}
	for _, e := range entries {
		if e.Type.Refundable() && (!e.RefundedAmount.Equal(refunded[e.RequestID]) || e.RefundedAmount.GreaterThan(e.Amount.Neg())) {
			v.violate("%s: %s %s spent %s, its refunds sum to %s, it says %s refunded", u, e.Type, e.RequestID, e.Amount.Neg(), refunded[e.RequestID], e.RefundedAmount)
		}
	}
}

// outcomes counts the requests of the book by what became of them.
type outcomes struct {
	acked, unacked, unknown int
	byKind                  map[string]map[string]int // kind -> outcome ("ok", or the code and reason of the refusal) -> requests
}

// checkBook checks the book of requests against the ledger: every request
// has a definite answer, an acknowledged one is on the ledger once with the
// entry it was acknowledged with, any other at most once, and no entry is
// there that no request asked for.
func checkBook(book []*sent, view ledgerView, v *verdict) outcomes {
	o := outcomes{byKind: map[string]map[string]int{}}
	counts := maps.Clone(view.counts)
	for _, s := range book {
		k := s.user + "/" + s.id
		n := counts[k]
		delete(counts, k)
		outcome := s.last
		if s.reason != "" {
			outcome += " " + s.reason
		}
		if o.byKind[s.kind] == nil {
			o.byKind[s.kind] = map[string]int{}
		}
		o.byKind[s.kind][outcome]++
		switch {
		case s.acked:
			o.acked++
			if n != 1 || (s.entryID != "" && view.byID[k].ID != s.entryID) {
				v.violate("acknowledged %s %s: %d entries (entry %s, acknowledged %s)", s.typ, k, n, view.byID[k].ID, s.entryID)
			}
		default:
			o.unacked++
			if !definite(s.last) {
				o.unknown++
				v.violate("%s %s gave up after %d attempts without a definite answer (%s)", s.typ, k, maxAttempts, s.last)
			}
			if n > 1 {
				v.violate("unacknowledged %s %s (%s): %d entries", s.typ, k, s.last, n)
			}
		}
		if n == 1 && view.byID[k].Type != s.typ {
			v.violate("%s: a %s, its entry a %s", k, s.typ, view.byID[k].Type)
		}
		checkMeaning(s, k, n, view, v)
	}
	for k := range counts {
		v.violate("entry of request %s, which no client sent", k)
	}
	return o
}

// checkMeaning checks that a request did what it says: a hold made has its
// record; a capture or a void applied resolved its hold, by that entry, once
// and for what it says; a refund within what was left of its purchase or
// capture was applied, and one over it refused.
func checkMeaning(s *sent, k string, n int, view ledgerView, v *verdict) {
	if s.typ == ledger.EntryRefund {
		overCap := strings.HasPrefix(s.kind, kindRefundOverCap)
		if overCap && (s.acked || s.reason != string(client.ReasonRefundExceedsPurchase)) {
			v.violate("%s over what is left (%s of %s): %s %s, want refused with %s", k, s.amount, s.of.spent(), s.last, s.reason, client.ReasonRefundExceedsPurchase)
		}
		if !overCap && !s.acked {
			v.violate("%s within what is left (%s of %s): %s %s, want applied", k, s.amount, s.of.spent(), s.last, s.reason)
		}
	}
	e := view.byID[k]
	switch {
	case n != 1:
	case s.typ == ledger.EntryHold:
		if h, ok := view.holds[k]; !ok || h.Version != e.Version || !h.Amount.Equal(s.amount) {
			v.violate("hold %s (entry %d of %s): its record is %+v", k, e.Version, s.amount, h)
		}
	case s.typ == ledger.EntryCapture || s.typ == ledger.EntryRelease:
		h := view.holds[s.user+"/"+s.hold.id]
		if h.ResolveVersion != e.Version || (s.typ == ledger.EntryCapture && (h.State != ledger.HoldCaptured || !h.CapturedAmount.Equal(s.spent()))) ||
			(s.typ == ledger.EntryRelease && h.State != ledger.HoldVoided) {
			v.violate("%s %s of hold %s (entry %d): the hold's record is %+v", s.typ, k, s.hold.id, e.Version, h)
		}
	}
}

// checkCoverage checks that the run did what it is for: every fault
// happened, enough requests were acknowledged, and a soak ran every kind of
// request, with every kind of outcome the ledger writes itself.
func checkCoverage(sh shape, l *load, st ddbproxy.Stats, c caused, view ledgerView, o outcomes, v *verdict) {
	if st.Faults.Total() == 0 || st.Faults.LostAnswers == 0 || c.rounds < 3 || c.ledgerdKills != c.rounds || c.projectorKills != c.rounds || c.emulatorRestarts != (c.rounds+1)/3 {
		v.violate("the faults did not happen: %+v in %d rounds: %d kills of ledgerd, %d of the projector, %d emulator restarts", st.Faults, c.rounds, c.ledgerdKills, c.projectorKills, c.emulatorRestarts)
	}
	if st.TwoActionRefusals != 0 {
		v.violate("ledgerd sent %d transactions with two actions on one item, which DynamoDB refuses", st.TwoActionRefusals)
	}
	if o.acked < minAcked || o.byKind[kindAuthorize]["ok"] == 0 || o.byKind[kindCaptureAll]["ok"]+o.byKind[kindCapturePart]["ok"] == 0 {
		v.violate("only %d requests acknowledged (%v): the test proves little", o.acked, o.byKind)
	}
	reversals := 0
	for kind, outcomes := range o.byKind {
		if strings.HasPrefix(kind, "reversal ") {
			reversals += outcomes["ok"]
		}
	}
	if o.byKind[kindGrantPending]["ok"]+o.byKind[kindGrantPendingExpiring]["ok"] == 0 || o.byKind[kindGrantPendingLong]["ok"] == 0 || reversals == 0 ||
		view.own["MATURATION "+ownByMutation]+view.own["MATURATION "+ownBySweeper] == 0 {
		v.violate("no pending grant that matured, or none pending at the end, or no reversal applied: %v; the ledger's own entries %v", o.byKind, view.own)
	}
	if sh.ops == 0 {
		return
	}
	if n := l.answered.Load(); n < int64(sh.ops) {
		v.violate("the soak stopped at %d answered requests, short of %d", n, sh.ops)
	}
	f := st.Faults
	if f.Spikes == 0 || f.Resets == 0 || f.LostAnswers == 0 || f.LateAnswers == 0 || st.Conflicts == 0 {
		v.violate("a fault of the proxy never happened: %+v, %d TransactionConflicts", f, st.Conflicts)
	}
	for _, kind := range allKinds() {
		want := "ok"
		switch {
		case strings.HasPrefix(kind, kindRefundOverCap):
			want = "failed_precondition " + string(client.ReasonRefundExceedsPurchase)
		case strings.HasPrefix(kind, kindReverseOver):
			want = "failed_precondition " + string(client.ReasonReversalExceedsGrant)
		}
		if o.byKind[kind][want] == 0 {
			v.violate("the soak never had a %q answered %q: %v", kind, want, o.byKind[kind])
		}
	}
	for _, own := range []string{"EXPIRATION " + ownByMutation, "EXPIRATION " + ownBySweeper, "RELEASE of an expired hold " + ownBySweeper, "MATURATION " + ownByMutation, "MATURATION " + ownBySweeper} {
		if view.own[own] == 0 {
			v.violate("the soak wrote no %s: %v", own, view.own)
		}
	}
}

// allKinds are the kinds of request a soak must have sent, and seen
// applied (or, over what is left, refused).
func allKinds() []string {
	kinds := []string{kindGrant, kindGrantExpiring, kindPurchase, kindAuthorize, kindCaptureAll, kindCapturePart, kindVoid,
		kindGrantPending, kindGrantPendingExpiring, kindGrantPendingLong}
	for _, refund := range []string{kindRefundPart, kindRefundRest, kindRefundOverCap} {
		for _, of := range []string{"", refundOfCapture} {
			kinds = append(kinds, refund+of, refund+of+refundRepeated)
		}
	}
	for _, reversal := range []string{kindReversePart, kindReverseRest, kindReverseOver} {
		for _, of := range []string{reversalOfGrant, reversalBefore, reversalAfter} {
			kinds = append(kinds, reversal+of)
		}
	}
	return kinds
}

// summary is the run's report: what was sent and what became of it, the
// faults, and the invariants' results.
func summary(sh shape, l *load, st ddbproxy.Stats, c caused, rec reconciled, view ledgerView, o outcomes, v *verdict) string {
	var b strings.Builder
	mode := "small run"
	if sh.ops > 0 {
		mode = fmt.Sprintf("soak of %d requests", sh.ops)
	}
	fmt.Fprintf(&b, "%s: %d requests by %d clients through %d ledgerd on %d users (%d quiet) in %s, %.1f answered/s; %d attempts, %d retries; %d acknowledged, %d refused, %d without a definite answer\n",
		mode, len(l.book), sh.workers, sh.ledgerds, len(sh.users)+len(sh.quietUsers), len(sh.quietUsers), l.took.Round(time.Second),
		float64(l.answered.Load())/l.took.Seconds(), l.attempts.Load(), l.retries.Load(), o.acked, o.unacked-o.unknown, o.unknown)
	b.WriteString("requests by kind and outcome:\n")
	for _, kind := range slices.Sorted(maps.Keys(o.byKind)) {
		fmt.Fprintf(&b, "  %-48s", kind)
		for _, outcome := range slices.Sorted(maps.Keys(o.byKind[kind])) {
			fmt.Fprintf(&b, " %s %d;", outcome, o.byKind[kind][outcome])
		}
		b.WriteString("\n")
	}
	f := st.Faults
	fmt.Fprintf(&b, "faults of the proxy (%d DynamoDB calls, 1 ms added to each): %d latency spikes, %d resets, %d lost answers, %d late answers, %d TransactionConflicts, %d refusals of two actions on one item\n",
		st.Calls, f.Spikes, f.Resets, f.LostAnswers, f.LateAnswers, st.Conflicts, st.TwoActionRefusals)
	fmt.Fprintf(&b, "faults of the suite: %d rounds, %d SIGKILLs of ledgerd, %d of the projector, %d DynamoDB Local restarts\n",
		c.rounds, c.ledgerdKills, c.projectorKills, c.emulatorRestarts)
	fmt.Fprintf(&b, "the ledger's own entries: %v\n", view.own)
	fmt.Fprintf(&b, "invariants: reconcile clean %t (%d entries checked, %d findings); %d holds; %d violations of the book's checks",
		rec.Clean, rec.Entries, len(rec.Findings), len(view.holds), v.n)
	return b.String()
}
