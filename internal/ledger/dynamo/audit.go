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
// invariants of package ledger: the aggregate is the fold of the entries,
// versions run 1..N, no balance goes negative, request records and entries
// match one to one (a refusal record names no entry, and no entry has
// one), and refunds stay within their purchases. It may run
// while mutations commit: what commits after it has read the account is left
// for the next audit.
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
	if newest > acct.Version {
		now, err := l.account(ctx, user)
		if err != nil {
			return Audit{}, fmt.Errorf("audit %q: %w", user, err)
		}
		if now.Version >= newest {
			entries = slices.DeleteFunc(entries, func(e ledger.Entry) bool { return e.Version > acct.Version })
			maps.DeleteFunc(requests, func(_ string, r requestRecord) bool { return r.Version > acct.Version })
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
		if info, _ := e.Type.Info(); info.System {
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
		case r.Type != e.Type || !r.Amount.Equal(e.Amount.Abs()):
			add(ledger.FindingRequestMismatch, fmt.Sprint(e.Type, " ", e.Amount.Abs()), fmt.Sprint(r.Type, " ", r.Amount), e.Version)
		}
	}
	for _, e := range entries {
		if e.Type != ledger.EntryRefund {
			continue
		}
		p, ok := byVersion[e.PurchaseVersion]
		if !ok || p.Type != ledger.EntryPurchase || p.RequestID != e.PurchaseRequestID {
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
		if e.Type != ledger.EntryPurchase {
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
