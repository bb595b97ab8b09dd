package dynamo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Audit is what Audit found in one user's partition.
type Audit struct {
	Findings []ledger.Finding // none for a sound ledger
	Account  ledger.Account   // as stored
	Folded   ledger.Account   // the fold of Entries (ledger.Account.Apply)
	Entries  []ledger.Entry   // in version order
	Items    int              // items read
}

// Audit reads a user's whole partition with consistent reads and checks the
// invariants of package ledger: the aggregate is the fold of the entries
// (its balance, buckets, what it holds and its open holds), versions run
// 1..N, no balance goes negative, request records and entries match one to
// one (a refusal record names no entry, and no entry has one), refunds stay
// within their purchases (or captures), and each hold's record agrees with
// its entries: it resolved at most once, as its record says, and its
// capture spent no more than it held. It may run while mutations commit:
// what commits after it has read the account is left for the next audit.
//
// An open hold past its expiry is no finding of the audit: time decides
// that it has expired (a balance read counts it available, a capture is
// refused), and its RELEASE is written by the user's next mutation or the
// sweeper. Reconciliation reports one still open long after its expiry
// (reconcile.DefaultSweepGrace), as it does an expired bucket.
func (l *Ledger) Audit(ctx context.Context, user string) (Audit, error) {
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName:                 &l.table,
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(partitionKey(user))},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return Audit{}, fmt.Errorf("audit %q: query: %w", user, err)
		}
		items = append(items, out.Items...)
	}

	acct := ledger.NewAccount(user)
	var entries []ledger.Entry
	requests := map[string]requestRecord{} // the records of entries
	refusals := map[string]requestRecord{} // the records of refusals (decodeRequest checks their reason)
	var holds []ledger.Hold                // the hold records, in version order
	for _, item := range items {
		sk := item["SK"].(*types.AttributeValueMemberS).Value
		switch {
		case sk == accountSK:
			a, _, err := decodeAccount(item)
			if err != nil {
				return Audit{}, err
			}
			acct = a
		case strings.HasPrefix(sk, entryPrefix):
			e, _, err := decodeEntry(item)
			if err != nil {
				return Audit{}, err
			}
			entries = append(entries, e) // the query returns them in version order
		case strings.HasPrefix(sk, holdPrefix):
			h, err := decodeHold(item)
			if err != nil {
				return Audit{}, err
			}
			holds = append(holds, h)
		case strings.HasPrefix(sk, requestPrefix):
			r, err := decodeRequest(item)
			if err != nil {
				return Audit{}, err
			}
			if r.Refusal != nil {
				refusals[strings.TrimPrefix(sk, requestPrefix)] = r
			} else {
				requests[strings.TrimPrefix(sk, requestPrefix)] = r
			}
		}
	}

	// The query is many reads (a page is at most 1 MB), and purchases may
	// commit while it runs. The account comes first (A sorts before E# and
	// R#), so entries and request records past its version were committed
	// after it was read: if a second read of the account shows versions up
	// to theirs, they are left out of the audit (the next one has them).
	// Past what the account ever showed, they are the ledger's to explain,
	// and are audited.
	refundsRead := map[int64]decimal.Decimal{} // purchase version -> its refunds read, left out or not
	newest := int64(0)
	for _, e := range entries {
		if e.Type == ledger.EntryRefund {
			refundsRead[e.PurchaseVersion] = refundsRead[e.PurchaseVersion].Add(e.Amount)
		}
		newest = max(newest, e.Version)
	}
	for _, r := range requests {
		newest = max(newest, r.Version)
	}
	for _, h := range holds {
		newest = max(newest, h.Version, h.ResolveVersion)
	}
	if newest > acct.Version {
		now, err := l.account(ctx, user)
		if err != nil {
			return Audit{}, fmt.Errorf("audit %q: %w", user, err)
		}
		if now.Version >= newest {
			entries = slices.DeleteFunc(entries, func(e ledger.Entry) bool { return e.Version > acct.Version })
			maps.DeleteFunc(requests, func(_ string, r requestRecord) bool { return r.Version > acct.Version })
			holds = slices.DeleteFunc(holds, func(h ledger.Hold) bool { return h.Version > acct.Version })
			for i, h := range holds {
				if h.ResolveVersion > acct.Version { // resolved since: held, as of the account read
					holds[i].State, holds[i].ResolveVersion, holds[i].CapturedAmount = ledger.HoldHeld, 0, decimal.Zero
				}
			}
		}
	}

	var findings []ledger.Finding
	add := func(kind string, expected, found any, versions ...int64) {
		findings = append(findings, ledger.Finding{UserID: user, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
	}
	folded := ledger.NewAccount(user)              // the entries' fold (ledger.Account.Apply)
	folds := make([]decimal.Decimal, len(entries)) // its balance after each entry
	refunds := map[int64]decimal.Decimal{}         // purchase version -> sum of its refunds
	byVersion := map[int64]ledger.Entry{}
	for i, e := range entries {
		if want := int64(i + 1); e.Version != want {
			add(ledger.FindingVersionGap, want, e.Version, e.Version)
		}
		byVersion[e.Version] = e
		folded = folded.Apply(e)
		folds[i] = folded.Balance
		if e.Type == ledger.EntryRefund {
			refunds[e.PurchaseVersion] = refunds[e.PurchaseVersion].Add(e.Amount)
		}
		if e.System() {
			if e.RequestID != "" {
				add(ledger.FindingRequestMismatch, "no request_id on an entry the ledger writes itself", e.RequestID, e.Version)
			}
			continue
		}
		r, ok := requests[e.RequestID]
		refused, wasRefused := refusals[e.RequestID]
		switch {
		case wasRefused:
			add(ledger.FindingRequestMismatch, fmt.Sprint(e.Type, " ", e.Amount.Abs()), fmt.Sprint(refused.Type, " refused with ", refused.Refusal.Reason), e.Version)
		case !ok:
			add(ledger.FindingEntryWithoutRequest, "request record "+e.RequestID, "none", e.Version)
		case r.Version != e.Version:
			add(ledger.FindingRequestWithoutEntry, e.Version, r.Version, e.Version, r.Version)
		case r.Type != e.Type || !asked(r, e):
			add(ledger.FindingRequestMismatch, fmt.Sprint(e.Type, " ", e.Amount.Abs()), fmt.Sprint(r.Type, " ", r.Amount), e.Version)
		}
	}
	for _, e := range entries {
		if e.Type != ledger.EntryRefund {
			continue
		}
		p, ok := byVersion[e.PurchaseVersion]
		if !ok || !p.Type.Refundable() || p.RequestID != e.PurchaseRequestID {
			add(ledger.FindingRefundTarget, "purchase "+e.PurchaseRequestID, fmt.Sprintf("%s %s", p.Type, p.RequestID), e.Version, e.PurchaseVersion)
		}
	}
	// Each entry's balance_after must be the fold so far, and never
	// negative. An adjustment that explains the balance (see ledger.Mutation)
	// accounts for the run of entries before it that differ from the fold by
	// exactly its amount: those were written while the account's balance was
	// off by that much, and are explained, not findings.
	explained := decimal.Zero
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.ExplainsBalance {
			explained = e.Amount
		}
		off := e.BalanceAfter.Sub(folds[i])
		switch {
		case off.IsZero():
			if folds[i].IsNegative() {
				add(ledger.FindingNegativeBalance, ">= 0", folds[i], e.Version)
			}
		case off.Equal(explained) && !e.ExplainsBalance:
			if e.BalanceAfter.IsNegative() {
				add(ledger.FindingNegativeBalance, ">= 0", e.BalanceAfter, e.Version)
			}
		default:
			add(ledger.FindingBalanceAfter, folds[i], e.BalanceAfter, e.Version)
		}
	}
	if !acct.Balance.Equal(folded.Balance) {
		add(ledger.FindingBalanceMismatch, folded.Balance, acct.Balance, acct.Version)
	}
	// The stored buckets are the expiring ones; the never-expiring one is
	// the balance less them, whose mismatch is the balance's finding.
	if stored, fold := expiringOnly(acct.Buckets), expiringOnly(folded.Buckets); !slices.EqualFunc(stored, fold, sameBucket) {
		add(ledger.FindingBuckets, bucketsString(fold), bucketsString(stored), acct.Version)
	}
	findings = append(findings, auditHolds(acct, folded, entries, holds)...)
	if acct.Version != int64(len(entries)) {
		add(ledger.FindingVersionMismatch, len(entries), acct.Version, acct.Version)
	}
	claims := map[int64][]string{}
	for id, r := range requests {
		claims[r.Version] = append(claims[r.Version], id)
	}
	for v, ids := range claims {
		if len(ids) > 1 {
			slices.Sort(ids)
			add(ledger.FindingDuplicateRequest, "one request record for version "+fmt.Sprint(v), strings.Join(ids, ", "), v)
		}
	}
	for id, r := range requests {
		if e, ok := byVersion[r.Version]; !ok || e.RequestID != id {
			add(ledger.FindingRequestWithoutEntry, "entry version "+fmt.Sprint(r.Version)+" with request_id "+id, "none", r.Version)
		}
	}
	for _, e := range entries {
		if !e.Type.Refundable() {
			continue
		}
		// Refunds committed while the query ran may be in the purchase's
		// refunded amount, and are among the refunds read.
		sum, read := refunds[e.Version], refundsRead[e.Version]
		if read.GreaterThan(e.Amount.Neg()) {
			add(ledger.FindingRefundOverCap, "<= "+e.Amount.Neg().String(), read, e.Version)
		}
		switch {
		case sum.Equal(read) && !sum.Equal(e.RefundedAmount):
			add(ledger.FindingRefundedAmount, sum, e.RefundedAmount, e.Version)
		case e.RefundedAmount.LessThan(sum) || e.RefundedAmount.GreaterThan(read):
			add(ledger.FindingRefundedAmount, fmt.Sprintf("%s to %s", sum, read), e.RefundedAmount, e.Version)
		}
	}
	return Audit{Findings: findings, Account: acct, Folded: folded, Entries: entries, Items: len(items)}, nil
}

func expiringOnly(bs []ledger.Bucket) []ledger.Bucket {
	return slices.DeleteFunc(slices.Clone(bs), func(b ledger.Bucket) bool { return b.Expire.IsZero() })
}

func sameBucket(a, b ledger.Bucket) bool { return a.Expire.Equal(b.Expire) && a.Amount.Equal(b.Amount) }

func bucketsString(bs []ledger.Bucket) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = expiryKey(b.Expire) + ":" + b.Amount.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// asked says whether request record r asked for what entry e did: the
// amount of a purchase, grant, refund or adjustment, what a hold holds, a
// capture's amount (none: all of its hold), nothing for a void.
func asked(r requestRecord, e ledger.Entry) bool {
	switch {
	case e.Type == ledger.EntryHold:
		return r.Amount.Equal(e.HeldChange)
	case e.Type == ledger.EntryCapture && r.Amount.IsZero():
		return e.Amount.Equal(e.HeldChange)
	case e.Type == ledger.EntryRelease:
		return r.Amount.IsZero()
	}
	return r.Amount.Equal(e.Amount.Abs())
}

// auditHolds checks what acct holds against folded, the fold of its
// entries, and each hold's record (records, in version order) against the
// entries that made and resolved it.
func auditHolds(acct, folded ledger.Account, entries []ledger.Entry, records []ledger.Hold) []ledger.Finding {
	var findings []ledger.Finding
	add := func(kind string, expected, found any, versions ...int64) {
		findings = append(findings, ledger.Finding{UserID: acct.UserID, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
	}
	sum := decimal.Zero
	for _, h := range acct.Holds {
		sum = sum.Add(h.Amount)
	}
	if !acct.Held.Equal(folded.Held) || !acct.Held.Equal(sum) {
		add(ledger.FindingHeld, fmt.Sprintf("%s (the fold), the sum of the open holds", folded.Held), fmt.Sprintf("%s, open holds summing to %s", acct.Held, sum), acct.Version)
	}
	if stored, fold := holdsString(acct.Holds), holdsString(folded.Holds); stored != fold {
		add(ledger.FindingHolds, fold, stored, acct.Version)
	}

	made := map[string]ledger.Entry{}       // HOLD entries by their request_id
	resolved := map[string][]ledger.Entry{} // CAPTUREs and RELEASEs by the hold they name
	byVersion := make(map[int64]ledger.Hold, len(records))
	for _, h := range records {
		byVersion[h.Version] = h
	}
	for _, e := range entries {
		switch {
		case e.Type == ledger.EntryHold:
			made[e.RequestID] = e
		case e.HoldRequestID != "":
			resolved[e.HoldRequestID] = append(resolved[e.HoldRequestID], e)
		}
	}
	for id, es := range resolved {
		h, ok := made[id]
		if !ok {
			add(ledger.FindingHoldRecord, "a HOLD entry with request_id "+id, "none", versionsOf(es)...)
			continue
		}
		if len(es) > 1 {
			add(ledger.FindingHoldResolved, "at most one CAPTURE or RELEASE of hold "+id, len(es), versionsOf(es)...)
		}
		for _, e := range es {
			if e.Type == ledger.EntryCapture && e.Amount.Neg().GreaterThan(h.HeldChange) {
				add(ledger.FindingCaptureOverHold, "<= "+h.HeldChange.String(), e.Amount.Neg(), h.Version, e.Version)
			}
		}
	}
	for _, e := range entries {
		if e.Type != ledger.EntryHold {
			continue
		}
		want := ledger.HoldOf(e)
		if es := resolved[e.RequestID]; len(es) > 0 {
			want = ledger.ResolvedHold(want, es[0])
		}
		got, ok := byVersion[e.Version]
		delete(byVersion, e.Version)
		switch {
		case !ok:
			add(ledger.FindingHoldRecord, holdString(want), "none", e.Version)
		case holdString(got) != holdString(want):
			add(ledger.FindingHoldRecord, holdString(want), holdString(got), e.Version)
		}
	}
	for _, h := range records {
		if _, ok := byVersion[h.Version]; ok {
			add(ledger.FindingHoldRecord, "no hold record without its HOLD entry", holdString(h), h.Version)
		}
	}
	return findings
}

// holdString is what a hold record says, as an audit compares it.
func holdString(h ledger.Hold) string {
	s := fmt.Sprintf("%s %s %s expires %s", h.RequestID, h.Amount, h.State, expiryKey(h.ExpireTime))
	if h.ResolveVersion > 0 {
		s += fmt.Sprint(" resolved by ", h.ResolveVersion)
	}
	if h.State == ledger.HoldCaptured {
		s += " captured " + h.CapturedAmount.String()
	}
	return s
}

// holdsString is open holds by request_id and amount.
func holdsString(hs []ledger.Hold) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.RequestID + ":" + h.Amount.String()
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, " ") + "}"
}

func versionsOf(es []ledger.Entry) []int64 {
	vs := make([]int64, len(es))
	for i, e := range es {
		vs[i] = e.Version
	}
	return vs
}
