package dynamo

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Every read here is strongly consistent: these reads decide money or show
// the ledger as it is.

// Balance returns the user's account; a user without entries gets
// ledger.NewAccount (balance 0, version 0, active).
func (l *Ledger) Balance(ctx context.Context, user string) (ledger.Account, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return ledger.Account{}, err
	}
	return l.account(ctx, user)
}

func (l *Ledger) account(ctx context.Context, user string) (ledger.Account, error) {
	out, err := l.get(ctx, accountKey(user))
	if err != nil {
		return ledger.Account{}, fmt.Errorf("get account of %q: %w", user, err)
	}
	a, ok, err := decodeAccount(out)
	if err != nil || !ok {
		return ledger.NewAccount(user), err
	}
	return a, nil
}

func (l *Ledger) request(ctx context.Context, user, requestID string) (requestRecord, bool, error) {
	item, err := l.get(ctx, requestKey(user, requestID))
	if err != nil {
		return requestRecord{}, false, fmt.Errorf("get request %q of %q: %w", requestID, user, err)
	}
	if len(item) == 0 {
		return requestRecord{}, false, nil
	}
	r, err := decodeRequest(item)
	return r, err == nil, err
}

func (l *Ledger) entry(ctx context.Context, user string, version int64) (ledger.Entry, bool, error) {
	item, err := l.get(ctx, entryKey(user, version))
	if err != nil {
		return ledger.Entry{}, false, fmt.Errorf("get entry %d of %q: %w", version, user, err)
	}
	return decodeEntry(item)
}

func (l *Ledger) get(ctx context.Context, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &l.table,
		Key:            key,
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// Entries returns up to pageSize entries of user in version order, starting
// after the position in token, and the token of the next page ("" on the
// last page); pagetoken.Codec.Entries pages, as for every store.
func (l *Ledger) Entries(ctx context.Context, user string, pageSize int, token string) ([]ledger.Entry, string, error) {
	return l.tokens.Entries(ctx, l.EntriesAfter, user, pageSize, token)
}

// EntriesAfter returns up to limit entries of user with versions above
// after, in version order, read consistently.
func (l *Ledger) EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error) {
	var entries []ledger.Entry
	var start map[string]types.AttributeValue
	for len(entries) < limit {
		out, err := l.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &l.table,
			ConsistentRead:         aws.Bool(true),
			KeyConditionExpression: aws.String("PK = :pk AND SK BETWEEN :from AND :to"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk":   str(partitionKey(user)),
				":from": str(entrySK(after + 1)),
				":to":   str(entryPrefix + "99999999999999999999"),
			},
			Limit:             aws.Int32(int32(min(limit-len(entries), 1000))),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("query entries of %q: %w", user, err)
		}
		for _, item := range out.Items {
			e, _, err := decodeEntry(item)
			if err != nil {
				return nil, err
			}
			entries = append(entries, e)
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		start = out.LastEvaluatedKey
	}
	return entries, nil
}

// Ping checks that the ledger table answers a read.
func (l *Ledger) Ping(ctx context.Context) error {
	_, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: key("-", "PING")})
	if err != nil {
		return fmt.Errorf("read ledger table %s: %w", l.table, err)
	}
	return nil
}

// Accounts calls fn for every account, scanning the table in segments
// parallel segments (eventually consistent: this finds users, it does not
// decide money). fn may be called concurrently; its first error stops the scan.
func (l *Ledger) Accounts(ctx context.Context, segments int, fn func(ledger.Account) error) error {
	return l.parallelScan(ctx, segments, dynamodb.ScanInput{
		FilterExpression:          aws.String("SK = :a"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": str(accountSK)},
	}, func(_ int, out *dynamodb.ScanOutput) error {
		for _, item := range out.Items {
			a, _, err := decodeAccount(item)
			if err == nil {
				err = fn(a)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Users calls fn for every user with an account item or a first entry (so a
// user whose account item is missing is found too), scanning in segments
// parallel segments. scanned, if not nil, is told how many items each page
// read. fn may be called concurrently; its first error stops the scan.
func (l *Ledger) Users(ctx context.Context, segments int, scanned func(int), fn func(user string) error) error {
	segments = max(segments, 1)
	last := make([]string, segments) // per segment: a partition's items come together, A before E#
	return l.parallelScan(ctx, segments, dynamodb.ScanInput{
		ProjectionExpression:      aws.String("PK, SK"),
		FilterExpression:          aws.String("SK = :a OR SK = :first"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": str(accountSK), ":first": str(entrySK(1))},
	}, func(seg int, out *dynamodb.ScanOutput) error {
		if scanned != nil {
			scanned(int(out.ScannedCount))
		}
		for _, item := range out.Items {
			pk := item["PK"].(*types.AttributeValueMemberS).Value
			if pk == last[seg] {
				continue
			}
			last[seg] = pk
			if err := fn(strings.TrimPrefix(pk, "ACCT#")); err != nil {
				return err
			}
		}
		return nil
	})
}

// parallelScan scans the table with in, in segments parallel segments, and
// calls page with each page (segments call it concurrently). The first error
// is returned once every segment has stopped.
func (l *Ledger) parallelScan(ctx context.Context, segments int, in dynamodb.ScanInput, page func(seg int, out *dynamodb.ScanOutput) error) error {
	segments = max(segments, 1)
	errs := make(chan error, segments)
	for seg := range segments {
		go func() {
			in := in
			in.TableName, in.Segment, in.TotalSegments = &l.table, aws.Int32(int32(seg)), aws.Int32(int32(segments))
			p := dynamodb.NewScanPaginator(l.db, &in)
			for p.HasMorePages() {
				out, err := p.NextPage(ctx)
				if err == nil {
					err = page(seg, out)
				}
				if err != nil {
					errs <- fmt.Errorf("scan segment %d of %s: %w", seg, l.table, err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range segments {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// CountAccounts counts the account items (for progress; eventually
// consistent). scanned, if not nil, is told how many items each page read.
func (l *Ledger) CountAccounts(ctx context.Context, scanned func(int)) (int64, error) {
	var n int64
	p := dynamodb.NewScanPaginator(l.db, &dynamodb.ScanInput{
		TableName:                 &l.table,
		Select:                    types.SelectCount,
		FilterExpression:          aws.String("SK = :a"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": str(accountSK)},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("count accounts: %w", err)
		}
		if scanned != nil {
			scanned(int(out.ScannedCount))
		}
		n += int64(out.Count)
	}
	return n, nil
}
