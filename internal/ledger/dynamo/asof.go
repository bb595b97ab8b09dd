package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// The account as of a time, and statements (issue 34), at a cost that does
// not grow with the user's life. Snapshots of the aggregate:
//
//	PK=ACCT#<user> SK=S#<update_time, fixed width>#<version, 20 digits>
//	                   the account after that version, as the account item keeps it
//
// The write path puts one in the transaction that carries the account past
// a multiple of ledger.SnapshotEvery entries (ledger.SnapshotDue): one item
// write more every 64 entries, no extra call. Sorted by time, then version,
// the latest at or before t is one Query (newest first, Limit 1); the
// entries after it up to t are fewer than SnapshotEvery and a
// transaction's entries (maxAsOfEntries), read by a second Query (more,
// in pages of SnapshotEvery, when a transaction carried the account far
// past the boundary). A user
// whose entries were written before snapshots existed has none for them:
// the account as of a time before the first snapshot folds from version 1,
// at a cost that grows with what was written before it (no snapshot is
// written lazily on a read: a read writes nothing).

const snapshotPrefix = "S#"

// maxAsOfEntries bounds the entries after a snapshot that the account as of
// a time folds: the next snapshot is at most SnapshotEvery entries and one
// transaction's later.
const maxAsOfEntries = ledger.SnapshotEvery + maxTxItems

func snapshotSK(a ledger.Account) string {
	return fmt.Sprintf("%s%s#%0*d", snapshotPrefix, formatTime(a.UpdateTime), versionDigits, a.Version)
}

// snapshotItem is the snapshot of account a: the account item's own
// attributes under the snapshot's key.
func snapshotItem(a ledger.Account) map[string]types.AttributeValue {
	item := accountAttributes(a)
	item["PK"], item["SK"] = ddbattr.S(partitionKey(a.UserID)), ddbattr.S(snapshotSK(a))
	return item
}

// AccountAt is the account of user as its entries recorded it at t: the
// latest snapshot at or before t, with the entries after it written at or
// before t folded in (ledger.AccountAsOf). What time decided by t and no
// entry says yet is the caller's: Account.At(t), as a balance read does.
// It reads, consistently, one snapshot and at most maxAsOfEntries entries.
func (l *Ledger) AccountAt(ctx context.Context, user string, t time.Time) (ledger.Account, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return ledger.Account{}, err
	}
	t = ledger.Instant(t)
	out, err := l.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              &l.table,
		ConsistentRead:         aws.Bool(true),
		KeyConditionExpression: aws.String("PK = :pk AND SK BETWEEN :from AND :to"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk":   ddbattr.S(partitionKey(user)),
			":from": ddbattr.S(snapshotPrefix),
			":to":   ddbattr.S(snapshotPrefix + formatTime(t) + "#~"), // '~' sorts after every digit
		},
		ScanIndexForward: aws.Bool(false),
		Limit:            aws.Int32(1),
	})
	if err != nil {
		return ledger.Account{}, unavailable(fmt.Errorf("query the snapshot of %q at %s: %w", user, formatTime(t), err), fmt.Sprintf("read the account of %q", user))
	}
	var base ledger.Account
	if len(out.Items) > 0 {
		if base, _, err = decodeAccount(out.Items[0]); err != nil {
			return ledger.Account{}, err
		}
	}
	var entries []ledger.Entry
	// Pages of SnapshotEvery: the next snapshot is usually that far, and a
	// page reads all its items whether t needs them or not. Past what a
	// snapshot bounds (a user whose entries predate snapshots), pages of
	// maxAsOfEntries.
	page := func() int {
		if len(entries) < maxAsOfEntries {
			return min(ledger.SnapshotEvery, maxAsOfEntries-len(entries))
		}
		return maxAsOfEntries
	}
	err = l.versions(ctx, user, entryPrefix, base.Version, page, func(item map[string]types.AttributeValue) (bool, error) {
		e, _, err := decodeEntry(item)
		if err != nil || e.CreateTime.After(t) {
			return false, err
		}
		entries = append(entries, e)
		return true, nil
	})
	if err != nil {
		return ledger.Account{}, err
	}
	return ledger.AccountAsOf(user, base, entries, t)
}

// Statement is a page of user's statement as q asks for it (paged as every
// list is, pagetoken.List), and the next page's token. Every page reads the
// whole window, so that its totals and balances are the same on every page.
func (l *Ledger) Statement(ctx context.Context, user string, q ledger.StatementQuery) (ledger.Statement, string, error) {
	var s ledger.Statement
	page, next, err := pagetoken.List(l.tokens, user, q, func(q ledger.StatementQuery, w pagetoken.Window) ([]ledger.Entry, error) {
		var err error
		s, err = ledger.ReadStatement(ctx, l, user, q)
		return s.Page(w.After, w.Limit), err
	})
	s.Entries = page
	return s, next, err
}
