package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Partition is what a store reads of one user for an audit: the account
// and every record kept beside it, as of one moment (the account's
// version). A store reads it, Audit checks it; neither needs the other.
type Partition struct {
	Account  Account                  // as stored
	Entries  []Entry                  // in version order
	Requests map[string]RequestRecord // the idempotency records, by request_id
	Holds    []Hold                   // the hold records, in version order
	// Later are entries read with the rest but committed after Account was
	// read (a store that reads the partition in several requests may see
	// them). They are not audited, the next audit has them; but a
	// purchase's refunded amount may already count their refunds.
	Later []Entry
	Items int // records the store read for it: what the read cost, for a reader that paces itself
	// Kinds is the program's point kinds as the store knows them; with
	// them, the audit checks that no spend drew an ineligible bucket
	// (eligibleDraws). Nil: not checked.
	Kinds Kinds
}

// RequestRecord is a request_id's idempotency record as an audit reads it:
// what the request asked for and what it did.
type RequestRecord struct {
	Type EntryType
	// Amount is what the request asked for: positive, or zero for a void
	// and for a capture of all of its hold.
	Amount  decimal.Decimal
	Version int64 // of the entry it wrote; 0 for a refusal
	// Last is the version of the last entry its call wrote: Version, or
	// the EXPIRATION the ledger wrote right after it in the same call,
	// whose account the call answered (Result). 0 for a refusal.
	Last    int64
	Refusal *Error // the final refusal it got; nil if it wrote an entry
}

// Audit checks a user's partition against the invariants of this package
// (doc.go) and returns the fold of its entries (Account.Apply) and what
// breaks them; none for a sound partition:
//
//   - the entries' versions run 1..N, the account's version is N;
//   - each entry's balance_after is the fold so far, and neither it nor the
//     account's balance is negative;
//   - the account has the fold's balance, expiring buckets, held and open
//     holds; its buckets and held sum to its balance, held is the sum of
//     the open holds and at most the balance;
//   - request records and entries match one to one (a refusal record names
//     no entry, an entry the ledger writes itself has no request), and a
//     record asked for what its entry did;
//   - refunds name a refundable entry, stay within it, and its refunded
//     amount is their sum;
//   - each hold's record agrees with its entries: it resolved at most
//     once, as its record says, and its capture spent no more than it held;
//   - the account has the fold's pending points and lots, its pending is
//     the sum of its lots;
//   - reversals name a grant by both its version and its request_id, stay
//     within it, and its reversed amount is their sum;
//   - no bucket or open hold that expired before expiredBefore, and no
//     pending grant that matured before it, is still on the account
//     (zero: not checked). Time decides that it expired; its
//     EXPIRATION or RELEASE is the sweeper's to write, and one still
//     missing long after says the sweeper is not running.
//
// Every store's partition goes through it: reconciliation (package
// reconcile, over the DynamoDB store or the memory one), the contract
// suite (ledgertest.Sound) and the load test's checks (through package
// reconcile).
func Audit(p Partition, expiredBefore time.Time) (Account, []Finding) {
	a := &audit{Partition: p, user: p.Account.UserID, byVersion: map[int64]Entry{}}
	a.fold()
	a.entryRequests()
	a.refundTargets()
	a.balancesAfter()
	a.account()
	a.holdRecords()
	a.requestRecords()
	a.refundCaps()
	a.reversals()
	a.expiry(expiredBefore)
	a.eligibleDraws()
	return a.folded, a.findings
}

// audit is one Audit's running state.
type audit struct {
	Partition
	user      string
	folded    Account           // the fold of the entries
	folds     []decimal.Decimal // its balance after each entry
	byVersion map[int64]Entry
	negative  map[int64]bool // versions with a negative_balance finding
	findings  []Finding
}

func (a *audit) add(kind string, expected, found any, versions ...int64) {
	a.findings = append(a.findings, Finding{UserID: a.user, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
}

// fold folds the entries, checking that their versions run 1..N.
func (a *audit) fold() {
	a.folded = NewAccount(a.user)
	a.folds = make([]decimal.Decimal, len(a.Entries))
	for i, e := range a.Entries {
		if want := int64(i + 1); e.Version != want {
			a.add(FindingVersionGap, want, e.Version, e.Version)
		}
		a.byVersion[e.Version] = e
		a.folded = a.folded.Apply(e)
		a.folds[i] = a.folded.Balance
	}
}

// entryRequests checks each entry's request record: an entry the ledger
// writes itself has none, any other has one that names it and asked for
// what it did.
func (a *audit) entryRequests() {
	for _, e := range a.Entries {
		if e.System() {
			if e.RequestID != "" {
				a.add(FindingRequestMismatch, "no request_id on an entry the ledger writes itself", e.RequestID, e.Version)
			}
			continue
		}
		r, ok := a.Requests[e.RequestID]
		switch {
		case !ok:
			a.add(FindingEntryWithoutRequest, "request record "+e.RequestID, "none", e.Version)
		case r.Refusal != nil:
			a.add(FindingRequestMismatch, fmt.Sprint(e.Type, " ", e.Amount.Abs()), fmt.Sprint(r.Type, " refused with ", r.Refusal.Reason), e.Version)
		case r.Version != e.Version:
			a.add(FindingRequestWithoutEntry, e.Version, r.Version, e.Version, r.Version)
		case r.Type != e.Type || !asked(r, e):
			a.add(FindingRequestMismatch, fmt.Sprint(e.Type, " ", e.Amount.Abs()), fmt.Sprint(r.Type, " ", r.Amount), e.Version)
		}
	}
}

// asked says whether request record r asked for what entry e did: the
// amount of a purchase, grant, refund or adjustment, what a hold holds, a
// capture's amount (none: all of its hold), nothing for a void.
func asked(r RequestRecord, e Entry) bool {
	switch {
	case e.Type == EntryHold:
		return r.Amount.Equal(e.HeldChange)
	case e.Type == EntryCapture && r.Amount.IsZero():
		return e.Amount.Equal(e.HeldChange)
	case e.Type == EntryRelease:
		return r.Amount.IsZero()
	case e.Type == EntryReversal && r.Amount.IsZero(): // all that was left of the grant
		return true
	}
	// A pending credit asked for what it put aside; a reversal for what
	// it took from both.
	return r.Amount.Equal(e.Amount.Abs().Add(e.PendingChange.Abs()))
}

// refundTargets checks that each refund names a refundable entry by both
// its version and its request_id.
func (a *audit) refundTargets() {
	for _, e := range a.Entries {
		if e.Type != EntryRefund {
			continue
		}
		p, ok := a.byVersion[e.PurchaseVersion]
		if !ok || !p.Type.Refundable() || p.RequestID != e.PurchaseRequestID {
			a.add(FindingRefundTarget, "purchase "+e.PurchaseRequestID, fmt.Sprintf("%s %s", p.Type, p.RequestID), e.Version, e.PurchaseVersion)
		}
	}
}

// balancesAfter checks each entry's balance_after against the fold so far,
// and that it is not negative. An adjustment that explains the balance
// (see Mutation) accounts for the run of entries before it that differ
// from the fold by exactly its amount: those were written while the
// account's balance was off by that much, and are explained, not findings.
func (a *audit) balancesAfter() {
	a.negative = map[int64]bool{}
	negative := func(found decimal.Decimal, version int64) {
		a.add(FindingNegativeBalance, ">= 0", found, version)
		a.negative[version] = true
	}
	explained := decimal.Zero
	for i := len(a.Entries) - 1; i >= 0; i-- {
		e := a.Entries[i]
		if e.ExplainsBalance {
			explained = e.Amount
		}
		off := e.BalanceAfter.Sub(a.folds[i])
		switch {
		case off.IsZero():
			if a.folds[i].IsNegative() {
				negative(a.folds[i], e.Version)
			}
		case off.Equal(explained) && !e.ExplainsBalance:
			if e.BalanceAfter.IsNegative() {
				negative(e.BalanceAfter, e.Version)
			}
		default:
			a.add(FindingBalanceAfter, a.folds[i], e.BalanceAfter, e.Version)
		}
	}
}

// account compares the account with the fold of the entries.
func (a *audit) account() {
	acct, folded := a.Account, a.folded
	if !acct.Balance.Equal(folded.Balance) {
		a.add(FindingBalanceMismatch, folded.Balance, acct.Balance, acct.Version)
	}
	if acct.Balance.IsNegative() && !a.negative[acct.Version] {
		a.add(FindingNegativeBalance, ">= 0", acct.Balance, acct.Version)
	}
	// The expiring buckets are the fold's. The never-expiring one is what
	// the balance leaves after them and what is held (a store may keep only
	// the expiring ones), not the fold's: entries written while the balance
	// drifted drew on points the fold did not have, and an adjustment that
	// explains the balance puts the balance right, not that bucket. So,
	// with the balance and held the fold's, the buckets and held must sum
	// to the balance; with either off, that is their finding.
	if stored, fold := keptOnly(acct.Buckets), keptOnly(folded.Buckets); !slices.EqualFunc(stored, fold, sameBucket) {
		a.add(FindingBuckets, bucketsText(fold), bucketsText(stored), acct.Version)
	} else if acct.Balance.Equal(folded.Balance) && acct.Held.Equal(folded.Held) {
		total := acct.Held
		for _, b := range acct.Buckets {
			total = total.Add(b.Amount)
		}
		if !total.Equal(acct.Balance) {
			a.add(FindingBuckets, fmt.Sprintf("buckets and held summing to the balance, %s", acct.Balance), fmt.Sprintf("%s, held %s", bucketsText(acct.Buckets), acct.Held), acct.Version)
		}
	}
	held := decimal.Zero
	for _, h := range acct.Holds {
		held = held.Add(h.Amount)
	}
	if !acct.Held.Equal(folded.Held) || !acct.Held.Equal(held) || acct.Held.GreaterThan(decimal.Max(acct.Balance, decimal.Zero)) {
		a.add(FindingHeld, fmt.Sprintf("%s, the fold's and its open holds' sum, at most the balance", folded.Held), fmt.Sprintf("%s, its open holds summing to %s", acct.Held, held), acct.Version)
	}
	if stored, fold := holdsText(acct.Holds), holdsText(folded.Holds); stored != fold {
		a.add(FindingHolds, fold, stored, acct.Version)
	}
	if lots := PendingTotal(acct.PendingLots); !acct.Pending.Equal(folded.Pending) || !acct.Pending.Equal(lots) || acct.Pending.IsNegative() {
		a.add(FindingPending, fmt.Sprintf("%s, the fold's and its lots' sum", folded.Pending), fmt.Sprintf("%s, its lots summing to %s", acct.Pending, lots), acct.Version)
	}
	if stored, fold := lotsText(acct.PendingLots), lotsText(folded.PendingLots); stored != fold {
		a.add(FindingPending, fold, stored, acct.Version)
	}
	if acct.Version != int64(len(a.Entries)) || acct.Version != folded.Version {
		a.add(FindingVersionMismatch, len(a.Entries), acct.Version, acct.Version)
	}
}

func sameBucket(a, b Bucket) bool {
	return a.Expire.Equal(b.Expire) && a.Amount.Equal(b.Amount) && a.Kind == b.Kind
}

// keptOnly is the buckets but the standard never-expiring one, which a
// store may keep as what the others leave of the balance: each kind's
// buckets are the fold of the entries' credits and draws.
func keptOnly(bs []Bucket) []Bucket {
	return slices.DeleteFunc(slices.Clone(bs), func(b Bucket) bool { return b.Expire.IsZero() && b.Kind == "" })
}

// eligibleDraws reports a purchase, hold or capture that drew a bucket
// its merchant and category may not spend, by the kinds as they are now.
// A spend decided before its kind last changed (with MaxKindRefresh for
// the instances' caches to follow) was decided under the older rules,
// which the ledger does not keep: it is not checked.
func (a *audit) eligibleDraws() {
	if a.Kinds == nil {
		return
	}
	for _, e := range a.Entries {
		if e.Type != EntryPurchase && e.Type != EntryHold && e.Type != EntryCapture {
			continue
		}
		for _, d := range e.Draws {
			k, ok := a.Kinds.Get(d.Kind)
			switch {
			case !ok:
				a.add(FindingIneligibleDraw, "a draw of a known kind", fmt.Sprintf("a draw of %s of unknown kind %q", d.Amount, d.Kind), e.Version)
			case !e.CreateTime.After(k.UpdateTime.Add(MaxKindRefresh)):
			case !k.Eligible(e.MerchantID, e.Category):
				a.add(FindingIneligibleDraw, fmt.Sprintf("draws of kinds eligible %s", whereText(e.MerchantID, e.Category)),
					fmt.Sprintf("a draw of %s of kind %q", d.Amount, KindName(d.Kind)), e.Version)
			}
		}
	}
}

// holdRecords checks each hold's record against the entries that made
// and resolved it: resolved at most once, a capture within its hold, and
// the record saying what the entries did.
func (a *audit) holdRecords() {
	made := map[string]Entry{}       // HOLD entries by their request_id
	resolved := map[string][]Entry{} // CAPTUREs and RELEASEs by the hold they name
	for _, e := range a.Entries {
		switch {
		case e.Type == EntryHold:
			made[e.RequestID] = e
		case e.HoldRequestID != "":
			resolved[e.HoldRequestID] = append(resolved[e.HoldRequestID], e)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(resolved)) {
		es := resolved[id]
		h, ok := made[id]
		if !ok {
			a.add(FindingHoldRecord, "a HOLD entry with request_id "+id, "none", versionsOf(es)...)
			continue
		}
		if len(es) > 1 {
			a.add(FindingHoldResolved, "at most one CAPTURE or RELEASE of hold "+id, len(es), versionsOf(es)...)
		}
		for _, e := range es {
			if e.Type == EntryCapture && e.Amount.Neg().GreaterThan(h.HeldChange) {
				a.add(FindingCaptureOverHold, "<= "+h.HeldChange.String(), e.Amount.Neg(), h.Version, e.Version)
			}
		}
	}
	records := make(map[int64]Hold, len(a.Holds))
	for _, h := range a.Holds {
		records[h.Version] = h
	}
	for _, e := range a.Entries {
		if e.Type != EntryHold {
			continue
		}
		want := HoldOf(e)
		if es := resolved[e.RequestID]; len(es) > 0 {
			want = ResolvedHold(want, es[0])
		}
		got, ok := records[e.Version]
		delete(records, e.Version)
		switch {
		case !ok:
			a.add(FindingHoldRecord, holdText(want), "none", e.Version)
		case holdText(got) != holdText(want):
			a.add(FindingHoldRecord, holdText(want), holdText(got), e.Version)
		}
	}
	for _, h := range a.Holds {
		if _, ok := records[h.Version]; ok {
			a.add(FindingHoldRecord, "no hold record without its HOLD entry", holdText(h), h.Version)
		}
	}
}

// requestRecords checks that each record of an entry names one, which
// names it back, and that no two records claim one entry.
func (a *audit) requestRecords() {
	ids := slices.Sorted(maps.Keys(a.Requests))
	claims := map[int64][]string{}
	for _, id := range ids {
		if r := a.Requests[id]; r.Refusal == nil {
			claims[r.Version] = append(claims[r.Version], id)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(claims)) {
		if ids := claims[v]; len(ids) > 1 {
			a.add(FindingDuplicateRequest, "one request record for version "+fmt.Sprint(v), strings.Join(ids, ", "), v)
		}
	}
	for _, id := range ids {
		r := a.Requests[id]
		if r.Refusal != nil {
			continue
		}
		if e, ok := a.byVersion[r.Version]; !ok || e.RequestID != id {
			a.add(FindingRequestWithoutEntry, "entry version "+fmt.Sprint(r.Version)+" with request_id "+id, "none", r.Version)
		}
		// What the call wrote after its entry, whose account it answered:
		// only the ledger's own expirations, and the maturation of a grant
		// whose effective time had come when it was written.
		for v := r.Version + 1; v <= r.Last; v++ {
			if e, ok := a.byVersion[v]; !ok || (e.Type != EntryExpiration && e.Type != EntryMaturation) {
				a.add(FindingRequestMismatch, fmt.Sprint("an EXPIRATION or MATURATION at version ", v, " written by request ", id), fmt.Sprint(e.Type), v)
			}
		}
	}
}

// refundCaps checks each purchase's (or capture's) refunds: they sum to at
// most what it spent, and to its refunded amount. Refunds committed after
// the account was read (Later) may be in the refunded amount, and are
// among the refunds read.
func (a *audit) refundCaps() {
	refunds := map[int64]decimal.Decimal{} // purchase version -> its refunds audited
	read := map[int64]decimal.Decimal{}    // and with those committed later
	for _, e := range a.Entries {
		if e.Type == EntryRefund {
			refunds[e.PurchaseVersion] = refunds[e.PurchaseVersion].Add(e.Amount)
			read[e.PurchaseVersion] = read[e.PurchaseVersion].Add(e.Amount)
		}
	}
	for _, e := range a.Later {
		if e.Type == EntryRefund {
			read[e.PurchaseVersion] = read[e.PurchaseVersion].Add(e.Amount)
		}
	}
	for _, e := range a.Entries {
		if !e.Type.Refundable() {
			continue
		}
		sum, read := refunds[e.Version], read[e.Version]
		if read.GreaterThan(e.Amount.Neg()) {
			a.add(FindingRefundOverCap, "<= "+e.Amount.Neg().String(), read, e.Version)
		}
		switch {
		case sum.Equal(read) && !sum.Equal(e.RefundedAmount):
			a.add(FindingRefundedAmount, sum, e.RefundedAmount, e.Version)
		case e.RefundedAmount.LessThan(sum) || e.RefundedAmount.GreaterThan(read):
			a.add(FindingRefundedAmount, fmt.Sprintf("%s to %s", sum, read), e.RefundedAmount, e.Version)
		}
	}
}

// reversals checks each reversal's grant, as refundCaps and refundTargets
// check refunds: it names a grant by its version and request_id, the
// grant's reversals sum to at most what it gave and to its reversed
// amount (with those committed after the account was read, Later, that
// it may already count).
func (a *audit) reversals() {
	sums := map[int64]decimal.Decimal{} // grant version -> its reversals audited
	read := map[int64]decimal.Decimal{} // and with those committed later
	for _, e := range a.Entries {
		if e.Type != EntryReversal {
			continue
		}
		g, ok := a.byVersion[e.GrantVersion]
		if !ok || g.Type != EntryGrant || g.RequestID != e.GrantRequestID {
			a.add(FindingReversalTarget, "grant "+e.GrantRequestID, fmt.Sprintf("%s %s", g.Type, g.RequestID), e.Version, e.GrantVersion)
		}
		taken := reversed(e)
		sums[e.GrantVersion], read[e.GrantVersion] = sums[e.GrantVersion].Add(taken), read[e.GrantVersion].Add(taken)
	}
	for _, e := range a.Later {
		if e.Type == EntryReversal {
			read[e.GrantVersion] = read[e.GrantVersion].Add(reversed(e))
		}
	}
	for _, e := range a.Entries {
		if e.Type != EntryGrant {
			continue
		}
		gave, sum, read := e.Amount.Add(e.PendingChange), sums[e.Version], read[e.Version]
		if read.GreaterThan(gave) {
			a.add(FindingReversalOverGrant, "<= "+gave.String(), read, e.Version)
		}
		switch {
		case sum.Equal(read) && !sum.Equal(e.ReversedAmount):
			a.add(FindingReversedAmount, sum, e.ReversedAmount, e.Version)
		case e.ReversedAmount.LessThan(sum) || e.ReversedAmount.GreaterThan(read):
			a.add(FindingReversedAmount, fmt.Sprintf("%s to %s", sum, read), e.ReversedAmount, e.Version)
		}
	}
}

// reversed is what reversal e took back of its grant: pending and
// spendable points together.
func reversed(e Entry) decimal.Decimal { return e.Amount.Neg().Sub(e.PendingChange) }

// expiry reports the account's buckets and open holds that expired
// before cutoff and are still on it: expired by time, not yet on the
// record.
func (a *audit) expiry(cutoff time.Time) {
	if cutoff.IsZero() {
		return
	}
	acct := a.Account
	late := func(what string, expire time.Time) {
		a.add(FindingExpiryNotRecorded, "on the record within the sweep grace of its expiry",
			fmt.Sprintf("%s expired at %s, still on the account", what, expire.UTC().Format(time.RFC3339)), acct.Version)
	}
	for _, b := range acct.Buckets {
		if !b.Expire.IsZero() && b.Expire.Before(cutoff) {
			late(fmt.Sprintf("bucket of %s", b.Amount), b.Expire)
		}
	}
	for _, h := range acct.Holds {
		if h.ExpireTime.Before(cutoff) {
			late(fmt.Sprintf("hold %q of %s", h.RequestID, h.Amount), h.ExpireTime)
		}
	}
	for _, l := range acct.PendingLots {
		if l.EffectiveTime.Before(cutoff) {
			a.add(FindingMaturityNotRecorded, "on the record within the sweep grace of its effective time",
				fmt.Sprintf("grant %q of %s matured at %s, still pending on the account", l.GrantRequestID, l.Amount, l.EffectiveTime.UTC().Format(time.RFC3339)), acct.Version)
		}
	}
}

// lotsText is pending lots as an audit compares them, in their order.
func lotsText(ls []PendingLot) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s:%s@%s/%s", l.GrantRequestID, l.Amount, expiryText(l.EffectiveTime), expiryText(l.ExpireTime))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// holdText is what a hold record says, as an audit compares it.
func holdText(h Hold) string {
	s := fmt.Sprintf("%s %s %s expires %s", h.RequestID, h.Amount, h.State, expiryText(h.ExpireTime))
	if h.ResolveVersion > 0 {
		s += fmt.Sprint(" resolved by ", h.ResolveVersion)
	}
	if h.State == HoldCaptured {
		s += " captured " + h.CapturedAmount.String()
	}
	return s
}

// holdsText is open holds by request_id and amount, in their order.
func holdsText(hs []Hold) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.RequestID + ":" + h.Amount.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func bucketsText(bs []Bucket) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = expiryText(b.Expire) + ":" + b.Amount.String()
		if b.Kind != "" {
			parts[i] = b.Kind + "/" + parts[i]
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// expiryText is an expiry time as findings show it: "never" for none.
func expiryText(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02T15:04:05.999999Z")
}

func versionsOf(es []Entry) []int64 {
	vs := make([]int64, len(es))
	for i, e := range es {
		vs[i] = e.Version
	}
	return vs
}
