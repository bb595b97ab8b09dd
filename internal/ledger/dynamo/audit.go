package dynamo

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Kinds of Finding.
const (
	FindingBalanceMismatch     = "balance_mismatch"      // aggregate balance != fold of entries
	FindingVersionMismatch     = "version_mismatch"      // aggregate version != number of entries
	FindingVersionGap          = "version_gap"           // entry versions are not 1..N
	FindingBalanceAfter        = "balance_after"         // an entry's balance_after != running fold
	FindingNegativeBalance     = "negative_balance"      // the fold went below zero
	FindingRequestWithoutEntry = "request_without_entry" // a request record names no matching entry
	FindingEntryWithoutRequest = "entry_without_request" // an entry has no request record
	FindingRefundOverCap       = "refund_over_cap"       // refunds of a purchase exceed it
	FindingRefundedAmount      = "refunded_amount"       // a purchase's refunded_amount != its refunds
	FindingRefundTarget        = "refund_target"         // a refund names no purchase, or another one
	FindingRequestMismatch     = "request_mismatch"      // a request record's type or amount != its entry's
)

// Finding is one way a user's ledger breaks an invariant of package ledger.
type Finding struct {
	UserID   string  `json:"user_id"`
	Kind     string  `json:"kind"`
	Expected string  `json:"expected"`
	Found    string  `json:"found"`
	Versions []int64 `json:"versions,omitempty"`
}

func (f Finding) String() string {
	return fmt.Sprintf("%s %s: expected %s, found %s (versions %v)", f.UserID, f.Kind, f.Expected, f.Found, f.Versions)
}

// Audit reads a user's whole partition with consistent reads and checks the
// invariants of package ledger: the aggregate is the fold of the entries,
// versions run 1..N, no balance goes negative, request records and entries
// match one to one, and refunds stay within their purchases. It returns the
// findings (none for a sound ledger) and the account.
func (l *Ledger) Audit(ctx context.Context, user string) ([]Finding, ledger.Account, error) {
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
			return nil, ledger.Account{}, fmt.Errorf("audit %q: query: %w", user, err)
		}
		items = append(items, out.Items...)
	}

	acct := ledger.NewAccount(user)
	var entries []ledger.Entry
	requests := map[string]requestRecord{}
	for _, item := range items {
		sk := item["SK"].(*types.AttributeValueMemberS).Value
		switch {
		case sk == accountSK:
			a, _, err := decodeAccount(item)
			if err != nil {
				return nil, acct, err
			}
			acct = a
		case strings.HasPrefix(sk, entryPrefix):
			e, _, err := decodeEntry(item)
			if err != nil {
				return nil, acct, err
			}
			entries = append(entries, e) // the query returns them in version order
		case strings.HasPrefix(sk, requestPrefix):
			r, err := decodeRequest(item)
			if err != nil {
				return nil, acct, err
			}
			requests[strings.TrimPrefix(sk, requestPrefix)] = r
		}
	}

	var findings []Finding
	add := func(kind string, expected, found any, versions ...int64) {
		findings = append(findings, Finding{UserID: user, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
	}
	balance := decimal.Zero
	refunds := map[int64]decimal.Decimal{} // purchase version -> sum of its refunds
	byVersion := map[int64]ledger.Entry{}
	for i, e := range entries {
		if want := int64(i + 1); e.Version != want {
			add(FindingVersionGap, want, e.Version, e.Version)
		}
		byVersion[e.Version] = e
		balance = balance.Add(e.Amount)
		if balance.IsNegative() {
			add(FindingNegativeBalance, ">= 0", balance, e.Version)
		}
		if !balance.Equal(e.BalanceAfter) {
			add(FindingBalanceAfter, balance, e.BalanceAfter, e.Version)
		}
		if e.Type == ledger.EntryRefund {
			refunds[e.PurchaseVersion] = refunds[e.PurchaseVersion].Add(e.Amount)
		}
		r, ok := requests[e.RequestID]
		switch {
		case !ok:
			add(FindingEntryWithoutRequest, "request record "+e.RequestID, "none", e.Version)
		case r.Version != e.Version:
			add(FindingRequestWithoutEntry, e.Version, r.Version, e.Version, r.Version)
		case r.Type != e.Type || !r.Amount.Equal(e.Amount.Abs()):
			add(FindingRequestMismatch, fmt.Sprint(e.Type, " ", e.Amount.Abs()), fmt.Sprint(r.Type, " ", r.Amount), e.Version)
		}
	}
	for _, e := range entries {
		if e.Type != ledger.EntryRefund {
			continue
		}
		p, ok := byVersion[e.PurchaseVersion]
		if !ok || p.Type != ledger.EntryPurchase || p.RequestID != e.PurchaseRequestID {
			add(FindingRefundTarget, "purchase "+e.PurchaseRequestID, fmt.Sprintf("%s %s", p.Type, p.RequestID), e.Version, e.PurchaseVersion)
		}
	}
	if !acct.Balance.Equal(balance) {
		add(FindingBalanceMismatch, balance, acct.Balance, acct.Version)
	}
	if acct.Version != int64(len(entries)) {
		add(FindingVersionMismatch, len(entries), acct.Version, acct.Version)
	}
	for id, r := range requests {
		if e, ok := byVersion[r.Version]; !ok || e.RequestID != id {
			add(FindingRequestWithoutEntry, "entry version "+fmt.Sprint(r.Version)+" with request_id "+id, "none", r.Version)
		}
	}
	for _, e := range entries {
		if e.Type != ledger.EntryPurchase {
			continue
		}
		sum := refunds[e.Version]
		if sum.GreaterThan(e.Amount.Neg()) {
			add(FindingRefundOverCap, "<= "+e.Amount.Neg().String(), sum, e.Version)
		}
		if !sum.Equal(e.RefundedAmount) {
			add(FindingRefundedAmount, sum, e.RefundedAmount, e.Version)
		}
	}
	return findings, acct, nil
}
