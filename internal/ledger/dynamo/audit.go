package dynamo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Audit is a user's partition, as Ledger.Audit read it, and what
// ledger.Audit found in it.
type Audit struct {
	ledger.Partition
	Folded   ledger.Account   // the fold of Entries (ledger.Account.Apply)
	Findings []ledger.Finding // none for a sound ledger
}

// Audit reads a user's partition (Partition) and checks it (ledger.Audit),
// without the check of expiry on the record, which needs a reconciliation's
// sweep grace.
//
// An open hold past its expiry is no finding of the audit: time decides
// that it has expired (a balance read counts it available, a capture is
// refused), and its RELEASE is written by the user's next mutation or the
// sweeper. Reconciliation reports one still open long after its expiry
// (reconcile.DefaultSweepGrace), as it does an expired bucket.
func (l *Ledger) Audit(ctx context.Context, user string) (Audit, error) {
	p, err := l.Partition(ctx, user)
	if err != nil {
		return Audit{}, err
	}
	folded, findings := ledger.Audit(p, time.Time{})
	return Audit{Partition: p, Folded: folded, Findings: findings}, nil
}

// Partition reads a user's whole partition with consistent reads: the
// account, entries, request records and hold records, as of the account's
// version. It may run while mutations commit: what commits after it has
// read the account is left for the next read (Partition.Later).
func (l *Ledger) Partition(ctx context.Context, user string) (ledger.Partition, error) {
	items, err := l.partitionItems(ctx, user)
	if err != nil {
		return ledger.Partition{}, err
	}
	p, err := decodePartition(user, items)
	if err != nil {
		return ledger.Partition{}, err
	}
	// The kinds the audit checks draws by: this instance's snapshot, which
	// knows every kind the partition names (read again if not).
	if p.Kinds, err = l.Kinds(ctx); err == nil && namesUnknownKind(p) {
		p.Kinds, err = l.loadKinds(ctx)
	}
	if err != nil {
		return ledger.Partition{}, fmt.Errorf("audit %q: %w", user, err)
	}
	// The query is many reads (a page is at most 1 MB), and purchases may
	// commit while it runs. The account comes first (A sorts before E#, H#
	// and R#), so entries and records past its version were committed after
	// it was read: if a second read of the account shows versions up to
	// theirs, they are left out (the next read has them). Past what the
	// account ever showed, they are the ledger's to explain, and are kept.
	if newest := newestVersion(p); newest > p.Account.Version {
		now, err := l.account(ctx, user)
		if err != nil {
			return ledger.Partition{}, fmt.Errorf("audit %q: %w", user, err)
		}
		if now.Version >= newest {
			asOfAccount(&p)
		}
	}
	return p, nil
}

// namesUnknownKind says whether p's account or entries name a kind its
// Kinds do not know.
func namesUnknownKind(p ledger.Partition) bool {
	if len(p.Kinds.Missing(p.Account, ledger.Mutation{})) > 0 {
		return true
	}
	for _, e := range p.Entries {
		if _, ok := p.Kinds.Get(e.Kind); !ok {
			return true
		}
		for _, d := range e.Draws {
			if _, ok := p.Kinds.Get(d.Kind); !ok {
				return true
			}
		}
	}
	return false
}

// partitionItems queries every item of a user's partition, consistently.
func (l *Ledger) partitionItems(ctx context.Context, user string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName:                 &l.table,
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": ddbattr.S(partitionKey(user))},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("audit %q: query: %w", user, err)
		}
		items = append(items, out.Items...)
	}
	return items, nil
}

// decodePartition decodes a partition's items, as the query returns them
// (in key order: the account, entries and hold records in version order,
// request records).
func decodePartition(user string, items []map[string]types.AttributeValue) (ledger.Partition, error) {
	p := ledger.Partition{Account: ledger.NewAccount(user), Requests: map[string]ledger.RequestRecord{}, Items: len(items)}
	for _, item := range items {
		sk := item["SK"].(*types.AttributeValueMemberS).Value
		switch {
		case sk == accountSK:
			a, _, err := decodeAccount(item)
			if err != nil {
				return p, err
			}
			p.Account = a
		case strings.HasPrefix(sk, entryPrefix):
			e, _, err := decodeEntry(item)
			if err != nil {
				return p, err
			}
			p.Entries = append(p.Entries, e)
		case strings.HasPrefix(sk, holdPrefix):
			h, err := decodeHold(item)
			if err != nil {
				return p, err
			}
			p.Holds = append(p.Holds, h)
		case strings.HasPrefix(sk, requestPrefix):
			r, err := decodeRequest(item) // it checks a refusal's reason
			if err != nil {
				return p, err
			}
			p.Requests[strings.TrimPrefix(sk, requestPrefix)] = r.RequestRecord
		}
	}
	return p, nil
}

// newestVersion is the newest version any record of p names.
func newestVersion(p ledger.Partition) int64 {
	newest := int64(0)
	for _, e := range p.Entries {
		newest = max(newest, e.Version)
	}
	for _, r := range p.Requests {
		newest = max(newest, r.Version)
	}
	for _, h := range p.Holds {
		newest = max(newest, h.Version, h.ResolveVersion)
	}
	return newest
}

// asOfAccount leaves out of p what was committed after its account: those
// entries move to Later, their records go, and a hold resolved since is
// held again, as the account saw it.
func asOfAccount(p *ledger.Partition) {
	v := p.Account.Version
	for _, e := range p.Entries {
		if e.Version > v {
			p.Later = append(p.Later, e)
		}
	}
	p.Entries = slices.DeleteFunc(p.Entries, func(e ledger.Entry) bool { return e.Version > v })
	maps.DeleteFunc(p.Requests, func(_ string, r ledger.RequestRecord) bool { return r.Version > v })
	p.Holds = slices.DeleteFunc(p.Holds, func(h ledger.Hold) bool { return h.Version > v })
	for i, h := range p.Holds {
		if h.ResolveVersion > v {
			p.Holds[i].State, p.Holds[i].ResolveVersion, p.Holds[i].CapturedAmount = ledger.HoldHeld, 0, decimal.Zero
		}
	}
}
