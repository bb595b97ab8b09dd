package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/stream"
	"github.com/pointledger/pointledger/migrations"
)

// Pending grants and their reversals in the load (issue 25). Grants
// pending for seconds mature during the run: a balance read counts them
// at once, the user's next mutation or the sweeper puts them on the record;
// grants pending for an hour are still pending at the end. Reversals take
// back part of a grant, all that is left of it, or more than is left (to be
// refused), of a grant pending or matured, or of an ordinary one. Balance
// reads show what time decided before the record does (checkReads).
const (
	kindGrantPending         = "grant pending for seconds"
	kindGrantPendingExpiring = "grant pending for seconds, then expiring"
	kindGrantPendingLong     = "grant pending for an hour"
	kindReversePart          = "reversal of part of what is left"
	kindReverseRest          = "reversal of all that is left"
	kindReverseOver          = "reversal over what is left"
	reversalOfGrant          = " of a grant"
	reversalBefore           = " of a pending grant, before maturity"
	reversalAfter            = " of a pending grant, after maturity"
	pendingLong              = time.Hour
)

// nextPendingGrant makes s a grant of 10 pending for 2 to 20 s (half of
// those expiring 5 to 20 s after), or, one in four, for an hour.
func nextPendingGrant(rng *rand.Rand, s *sent) {
	s.typ, s.kind, s.amount = ledger.EntryGrant, kindGrantPending, decimal.NewFromInt(10)
	s.delay = time.Duration(2+rng.IntN(19)) * time.Second
	switch rng.IntN(4) {
	case 0:
		pendingForLong(s)
	case 1, 2:
		s.kind, s.ttl = kindGrantPendingExpiring, time.Duration(5+rng.IntN(16))*time.Second
	}
}

// pendingForLong makes s a grant of 10 pending for an hour: still pending
// when the run ends.
func pendingForLong(s *sent) {
	s.typ, s.kind, s.amount, s.delay = ledger.EntryGrant, kindGrantPendingLong, decimal.NewFromInt(10), pendingLong
}

// nextReversal makes s a reversal of one of the worker's grants: an
// ordinary one, a pending one or one matured (by the clock), each a third
// of the time when the worker has all three: of 5 points, of all that is
// left (naming no amount), or of one point more than is left (to be
// refused); one in three is sent again by its request id once answered.
func nextReversal(rng *rand.Rand, s *sent, grants []*sent) {
	var pools [3][]*sent // ordinary, pending, matured
	now := time.Now()
	for _, g := range grants {
		switch {
		case g.delay == 0:
			pools[0] = append(pools[0], g)
		case now.Before(g.effective):
			pools[1] = append(pools[1], g)
		default:
			pools[2] = append(pools[2], g)
		}
	}
	i := rng.IntN(3)
	for len(pools[i]) == 0 { // the next kind there is: grants is not empty
		i = (i + 1) % 3
	}
	g := pools[i][rng.IntN(len(pools[i]))]
	s.user, s.of, s.typ = g.user, g, ledger.EntryReversal
	five := decimal.NewFromInt(5)
	switch k := rng.IntN(8); {
	case k == 0:
		s.kind, s.amount = kindReverseOver, g.left.Add(decimal.NewFromInt(1))
		s.want = s.amount
	case k < 4 || g.left.LessThanOrEqual(five):
		s.kind, s.amount, s.want = kindReverseRest, decimal.Zero, g.left // zero: all that is left, by naming no amount
	default:
		s.kind, s.amount, s.want = kindReversePart, five, five
	}
	switch {
	case g.delay == 0:
		s.kind += reversalOfGrant
	case time.Now().Before(g.effective): // what the load means; the checks go by the entries' times
		s.kind += reversalBefore
	default:
		s.kind += reversalAfter
	}
	if !g.left.Equal(g.amount) {
		s.kind += refundRepeated
	}
	s.repeat = rng.IntN(3) == 0
}

// taken is what reversal e took back of its grant: pending and spendable
// points together.
func taken(e ledger.Entry) decimal.Decimal { return e.Amount.Neg().Sub(e.PendingChange) }

// lotText is pending lots as the checks compare them.
func lotText(lots []ledger.PendingLot) []string {
	out := make([]string, len(lots))
	for i, l := range lots {
		out[i] = fmt.Sprintf("%s:%s@%s", l.GrantRequestID, l.Amount, l.EffectiveTime.Format(time.RFC3339Nano))
	}
	return out
}

// How long the suite waits for the sweeper once the load has stopped. It
// usually takes a few seconds. A shard lease that a SIGKILLed ledgerd held,
// or that the sweeper could not release while DynamoDB Local restarted,
// keeps the sweeper from that shard until it expires (LEDGER_LEASE_TTL,
// 3 s here; before the sweeper took that setting, a minute): if such a
// lease is still held after sweepWait, the suite does not wait it out but
// checks up to what was on the record. Without one, it waits up to
// sweepHang.
const (
	sweepWait = 15 * time.Second
	sweepHang = 3 * time.Minute
)

// waitSwept waits until the sweeper has put on the record everything that
// fell due by cutoff (the end of the load): every pending grant matured,
// every bucket and hold expired by then, read from DynamoDB (not through
// the proxy). It returns the time up to which everything due is on the
// record: cutoff, or, when a sweeper's lease was left held or after
// sweepHang (an error), just before the soonest thing due still off it.
func (s *services) waitSwept(t *testing.T, users []string, cutoff time.Time) time.Time {
	store := dynamo.New(dynamolocal.NewClient(s.emu.Endpoint), dynamo.Options{Table: migrations.LedgerTable})
	began, leases := time.Now(), s.sweepLeases(t)
	for {
		var soonest time.Time
		var late []string
		for _, u := range users {
			a, err := store.Balance(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			if due := a.NextDue(); !due.IsZero() && !due.After(cutoff) {
				late = append(late, fmt.Sprintf("%s: due at %s", u, due.Format(time.RFC3339Nano)))
				if soonest.IsZero() || due.Before(soonest) {
					soonest = due
				}
			}
		}
		if soonest.IsZero() {
			return cutoff
		}
		swept := soonest.Add(-time.Microsecond)
		if time.Since(began) > sweepWait {
			if left := leftHeld(leases, s.sweepLeases(t), time.Now()); len(left) > 0 {
				t.Logf("still off the record %s after the load stopped at %s: %v; the sweeper's leases on %v left held since: checked up to %s",
					time.Since(cutoff).Round(100*time.Millisecond), cutoff.Format(time.RFC3339Nano), late, left, swept.Format(time.RFC3339Nano))
				return swept
			}
		}
		if time.Since(began) > sweepHang {
			t.Errorf("the sweeper left off the record for %s what fell due before the load stopped at %s, with no lease of its left held: %v",
				sweepHang, cutoff.Format(time.RFC3339Nano), late)
			return swept
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sweepLeases reads the sweeper's shard leases (sweep.Sweeper's keys),
// from DynamoDB directly.
func (s *services) sweepLeases(t *testing.T) map[string]stream.Lease {
	table := stream.NewLeaseTable(dynamolocal.NewClient(s.emu.Endpoint), migrations.LeaseTable, nil)
	out := map[string]stream.Lease{}
	for shard := range dynamo.ExpiryShards {
		key := fmt.Sprintf("SWEEP#%02d", shard)
		l, ok, err := table.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out[key] = l
		}
	}
	return out
}

// leftHeld is the leases held at now, unchanged since before: no sweeper
// has had them since, a live one takes and gives back its leases at every
// pass.
func leftHeld(before, after map[string]stream.Lease, now time.Time) []string {
	var keys []string
	for k, l := range after {
		if b, ok := before[k]; ok && b.RVN == l.RVN && now.Before(l.Expires) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// pendingBook is what the book says of pending points and reversals.
type pendingBook struct {
	reversed map[string]decimal.Decimal // user/grant request_id -> what its acknowledged reversals took back
}

func newPendingBook(book []*sent) pendingBook {
	p := pendingBook{reversed: map[string]decimal.Decimal{}}
	for _, s := range book {
		if s.typ == ledger.EntryReversal && s.acked {
			k := s.user + "/" + s.of.id
			p.reversed[k] = p.reversed[k].Add(s.want)
		}
	}
	return p
}

// pendingAt is each user's points pending at t by the book: its
// acknowledged grants whose effective time is after t, less what their
// acknowledged reversals took back (all of it before t: the load stopped).
func (p pendingBook) pendingAt(book []*sent, t time.Time) map[string]decimal.Decimal {
	out := map[string]decimal.Decimal{}
	for _, s := range book {
		if s.typ == ledger.EntryGrant && s.acked && s.effective.After(t) {
			out[s.user] = out[s.user].Add(s.amount).Sub(p.reversed[s.user+"/"+s.id])
		}
	}
	return out
}

// checkPending checks pending grants and reversals against the ledger:
// each pending grant acknowledged as it was asked, with the effective time
// it was acknowledged with, and never refused as another request (a retry
// is the same request); each grant's reversals, in the ledger, sum to what
// the book's acknowledged ones took back, to the grant's reversed amount,
// and to at most the grant, each from what was pending before the grant's
// effective time and from spendable points after; each pending grant's
// MATURATION, at most one, after its effective time, of what was still
// pending, and there if anything was and it fell due by swept (the
// sweeper had put everything due by then on the record); every reversal within what was left applied (or refused
// INSUFFICIENT_BALANCE once its grant had matured) and every one over it
// refused REVERSAL_EXCEEDS_GRANT, a repeat answered as the first; and each
// account's pending, as time decides it now, what the book says is
// pending.
func checkPending(book []*sent, view ledgerView, swept time.Time, v *verdict) string {
	reversals, maturations := map[string][]ledger.Entry{}, map[string][]ledger.Entry{} // by user/grant request_id
	for u, entries := range view.entries {
		for _, e := range entries {
			switch e.Type {
			case ledger.EntryReversal:
				reversals[u+"/"+e.GrantRequestID] = append(reversals[u+"/"+e.GrantRequestID], e)
			case ledger.EntryMaturation:
				maturations[u+"/"+e.GrantRequestID] = append(maturations[u+"/"+e.GrantRequestID], e)
			default:
			}
		}
	}
	p := newPendingBook(book)
	var repeats, pendingGrants int
	for _, s := range book {
		k := s.user + "/" + s.id
		switch {
		case s.typ == ledger.EntryReversal:
			checkReversal(s, k, view, v)
			if s.repeat {
				repeats++
			}
		case s.typ == ledger.EntryGrant && s.acked && view.counts[k] == 1:
			g := view.byID[k]
			checkReversed(s, g, reversals[k], p.reversed[k], v)
			if s.delay > 0 {
				pendingGrants++
				checkPendingGrant(s, g, reversals[k], maturations[k], swept, v)
			}
		case s.typ == ledger.EntryGrant && s.delay > 0 && !s.acked && definite(s.last) && s.reason != string(client.ReasonTooManyPending) && s.reason != string(client.ReasonTooManyBuckets):
			v.violate("pending grant %s refused %s %s: a retry by request id is the same request", k, s.last, s.reason)
		}
	}
	now := time.Now()
	want := p.pendingAt(book, now)
	pendingNow := decimal.Zero
	for u, acct := range view.accounts {
		if got := acct.At(now).Pending; !got.Equal(want[u]) {
			v.violate("%s: %s pending at %s, by the book %s", u, got, now.Format(time.RFC3339Nano), want[u])
		}
		pendingNow = pendingNow.Add(want[u])
	}
	var before, after, ofGrant int
	for _, rs := range reversals {
		for _, r := range rs {
			switch {
			case !r.PendingChange.IsZero():
				before++
			case view.byID[r.UserID+"/"+r.GrantRequestID].EffectiveTime.IsZero():
				ofGrant++
			default:
				after++
			}
		}
	}
	return fmt.Sprintf("pending grants: %d acknowledged, %d matured on the record, %s points still pending at the end; reversals in the ledger: %d of pending points, %d of matured ones, %d of ordinary grants; %d reversals sent again by request id",
		pendingGrants, len(maturations), pendingNow, before, after, ofGrant, repeats)
}

// checkPendingGrant checks pending grant s, acknowledged as entry g, its
// reversals and its maturations (see checkPending).
func checkPendingGrant(s *sent, g ledger.Entry, reversals, maturations []ledger.Entry, swept time.Time, v *verdict) {
	k := s.user + "/" + s.id
	wantExpire := time.Time{}
	if s.ttl > 0 {
		wantExpire = g.EffectiveTime.Add(s.ttl) // a pending grant's ttl counts from its effective time
	}
	if !g.Amount.IsZero() || !g.PendingChange.Equal(s.amount) || !g.EffectiveTime.Equal(s.effective) || !g.ExpireTime.Equal(wantExpire) {
		v.violate("pending grant %s of %s, acknowledged effective at %s (ttl %s): its entry has amount %s, pending change %s, effective at %s, expiring at %s",
			k, s.amount, s.effective.Format(time.RFC3339Nano), s.ttl, g.Amount, g.PendingChange, g.EffectiveTime.Format(time.RFC3339Nano), g.ExpireTime.Format(time.RFC3339Nano))
	}
	left := s.amount // still pending at its effective time
	for _, r := range reversals {
		if r.CreateTime.Before(g.EffectiveTime) {
			left = left.Sub(taken(r))
		}
	}
	switch {
	case len(maturations) > 1:
		v.violate("pending grant %s matured %d times", k, len(maturations))
	case len(maturations) == 0 && left.IsPositive() && !g.EffectiveTime.After(swept):
		v.violate("pending grant %s of %s effective at %s, %s of it left: no MATURATION on the record", k, s.amount, g.EffectiveTime.Format(time.RFC3339Nano), left)
	case len(maturations) == 1:
		m := maturations[0]
		if !left.IsPositive() || !m.Amount.Equal(left) || !m.PendingChange.Equal(left.Neg()) || m.CreateTime.Before(g.EffectiveTime) || !m.EffectiveTime.Equal(g.EffectiveTime) || m.Version < g.Version {
			v.violate("pending grant %s (version %d) of %s effective at %s, %s left then: its MATURATION (version %d) of %s, pending change %s, at %s",
				k, g.Version, s.amount, g.EffectiveTime.Format(time.RFC3339Nano), left, m.Version, m.Amount, m.PendingChange, m.CreateTime.Format(time.RFC3339Nano))
		}
	}
}

// checkReversed checks acknowledged grant s, entry g, against its
// reversals in the ledger and what the book's acknowledged ones took back
// (booked): they sum to both and to the grant's reversed amount, at most
// the grant, each from pending points before its effective time and from
// spendable ones after (an ordinary grant's: always spendable).
func checkReversed(s *sent, g ledger.Entry, reversals []ledger.Entry, booked decimal.Decimal, v *verdict) {
	k := s.user + "/" + s.id
	sum := decimal.Zero
	for _, r := range reversals {
		sum = sum.Add(taken(r))
		pendingPart := r.CreateTime.Before(g.EffectiveTime) // never, for an ordinary grant (zero time)
		if (pendingPart && (!r.Amount.IsZero() || !r.PendingChange.Neg().Equal(taken(r)))) || (!pendingPart && !r.PendingChange.IsZero()) || r.GrantVersion != g.Version {
			v.violate("reversal %s of grant %s (version %d, effective at %s) at %s: amount %s, pending change %s, naming version %d",
				r.RequestID, k, g.Version, g.EffectiveTime.Format(time.RFC3339Nano), r.CreateTime.Format(time.RFC3339Nano), r.Amount, r.PendingChange, r.GrantVersion)
		}
	}
	if !sum.Equal(booked) || !g.ReversedAmount.Equal(sum) || sum.GreaterThan(s.amount) {
		v.violate("grant %s of %s: its %d reversals in the ledger took back %s, its entry says %s reversed, the acknowledged ones %s", k, s.amount, len(reversals), sum, g.ReversedAmount, booked)
	}
}

// checkReversal checks that reversal s did what it says (see checkPending).
func checkReversal(s *sent, k string, view ledgerView, v *verdict) {
	g := s.of
	over := strings.HasPrefix(s.kind, kindReverseOver)
	switch {
	case over && (s.acked || s.reason != string(client.ReasonReversalExceedsGrant)):
		v.violate("%s over what is left (%s of %s left of grant %s): %s %s, want refused with %s", k, s.want, g.amount, g.id, s.last, s.reason, client.ReasonReversalExceedsGrant)
	case over || s.acked:
	case s.reason == string(client.ReasonInsufficientBalance) && (g.delay == 0 || !s.answered.Before(g.effective)):
		// Its points were spendable by then, and others had spent them.
	default:
		v.violate("%s within what is left of grant %s (%s, effective at %s): %s %s at %s, want applied", k, g.id, s.want, g.effective.Format(time.RFC3339Nano), s.last, s.reason, s.answered.Format(time.RFC3339Nano))
	}
	if r := view.byID[k]; s.acked && view.counts[k] == 1 && (r.GrantRequestID != g.id || !taken(r).Equal(s.want)) {
		v.violate("reversal %s of %s of grant %s: its entry took back %s of grant %q", k, s.want, g.id, taken(r), r.GrantRequestID)
	}
	if !s.repeat || (!s.acked && !definite(s.last)) {
		return
	}
	a := s.again
	if (s.acked && (a.last != "ok" || a.entryID != s.entryID)) || (!s.acked && (a.last != s.last || a.reason != s.reason || !a.replayed)) {
		v.violate("%s sent again by request id: %s %s (entry %s, replayed %t), first %s %s (entry %s)", k, a.last, a.reason, a.entryID, a.replayed, s.last, s.reason, s.entryID)
	}
}

// checkReconciledPending checks the reconcile report's pending sums: what
// the accounts have pending is the fold of the entries' pending changes,
// and what it reports pending by month, as time decided at its start, is
// what the book says.
func checkReconciledPending(book []*sent, rec reconciled, v *verdict) {
	fromEntries, errE := decimal.NewFromString(rec.SumOfPendingChanges)
	fromAccounts, errA := decimal.NewFromString(rec.SumOfPending)
	byMonth := decimal.Zero
	for _, m := range rec.Pending {
		d, err := decimal.NewFromString(m.Amount)
		if err != nil {
			v.violate("reconcile: pending %q in %s: %v", m.Amount, m.Month, err)
		}
		byMonth = byMonth.Add(d)
	}
	want := decimal.Zero
	for _, d := range newPendingBook(book).pendingAt(book, rec.StartTime) {
		want = want.Add(d)
	}
	if errE != nil || errA != nil || !fromEntries.Equal(fromAccounts) || !byMonth.Equal(want) {
		v.violate("reconcile at %s: pending %q by the entries, %q by the accounts (%v, %v), %s by month; by the book %s",
			rec.StartTime.Format(time.RFC3339Nano), rec.SumOfPendingChanges, rec.SumOfPending, errE, errA, byMonth, want)
	}
}

// read is a balance read as the load saw it: when it was sent and when
// its answer came (the server decided in between), and the answer.
type read struct {
	user                   string
	sent, answered         time.Time
	version                int64
	balance, held, pending decimal.Decimal
	maturing               []time.Time // the effective times it says are still to come
	err                    error       // an answer that does not parse
}

// readBalance reads user's balance, as an app would show it, a few times
// at most through the faults (a read writes nothing: one that fails is
// only not checked), and keeps the answer for checkReads.
func (l *load) readBalance(user string, w int) {
	for attempt := range 5 {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r := read{user: user, sent: time.Now()}
		res, err := l.clients[(w+attempt)%len(l.clients)].GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
		r.answered = time.Now()
		cancel()
		if err != nil {
			continue
		}
		m := res.Msg
		var errs [3]error
		r.version = m.Version
		r.balance, errs[0] = decimal.NewFromString(m.Balance)
		r.held, errs[1] = decimal.NewFromString(m.Held)
		r.pending, errs[2] = decimal.NewFromString(m.Pending)
		r.err = errors.Join(errs[:]...)
		for _, x := range m.Maturing {
			r.maturing = append(r.maturing, x.GetEffectiveTime().AsTime())
		}
		l.mu.Lock()
		l.reads = append(l.reads, r)
		l.mu.Unlock()
		return
	}
}

// checkReads checks each balance read against the fold of its user's
// entries up to the version it read, as time decided then: a read counts
// points matured by time at once, before any MATURATION is on the record,
// and leaves out what expired. The server decided at some instant between
// sending and answering; a read during which something fell due is not
// compared (it could be either), but none may say that points whose
// effective time had passed when it was sent are still to come.
func checkReads(reads []read, view ledgerView, v *verdict) string {
	var ambiguous, maturedByTime int
	for _, r := range reads {
		entries := view.entries[r.user]
		if r.err != nil || r.version > int64(len(entries)) {
			v.violate("balance read of %s: version %d of %d entries (%v)", r.user, r.version, len(entries), r.err)
			continue
		}
		for _, e := range r.maturing {
			if !e.After(r.sent) {
				v.violate("balance read of %s sent at %s: points effective at %s still to come", r.user, r.sent.Format(time.RFC3339Nano), e.Format(time.RFC3339Nano))
			}
		}
		acct, _, err := ledger.Fold(r.user, entries[:r.version])
		if err != nil {
			v.violate("%s: the entries do not fold: %v", r.user, err)
			continue
		}
		for _, l := range acct.PendingLots {
			if !l.EffectiveTime.After(r.sent) {
				maturedByTime++ // matured by time, its MATURATION not yet on the record
				break
			}
		}
		due := dueText(acct, r.sent)
		if due != dueText(acct, r.answered) {
			ambiguous++
			continue
		}
		at := acct.At(r.sent)
		if !r.balance.Equal(at.Balance) || !r.held.Equal(at.Held) || !r.pending.Equal(at.Pending) {
			v.violate("balance read of %s at version %d, between %s and %s: balance %s, held %s, pending %s; the fold of its entries then %s, %s, %s (due then: %s; buckets %v)",
				r.user, r.version, r.sent.Format(time.RFC3339Nano), r.answered.Format(time.RFC3339Nano), r.balance, r.held, r.pending, at.Balance, at.Held, at.Pending, due, acct.Buckets)
		}
	}
	return fmt.Sprintf("balance reads: %d, %d compared with the fold of the entries (the rest answered while something fell due), %d counted a pending grant matured by time before its MATURATION was on the record",
		len(reads), len(reads)-ambiguous, maturedByTime)
}

// dueText is what time has decided of acct by t, as the entries the
// ledger would write for it: two instants with the same are alike.
func dueText(acct ledger.Account, t time.Time) string {
	var b strings.Builder
	for _, e := range ledger.DecideExpiry(acct, t).Entries {
		fmt.Fprintf(&b, "%s %s %s %s %v; ", e.Type, e.Amount, e.HeldChange, e.PendingChange, e.Draws)
	}
	return b.String()
}
