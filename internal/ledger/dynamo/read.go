package dynamo

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
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
		return ledger.Account{}, unavailable(fmt.Errorf("get account of %q: %w", user, err), fmt.Sprintf("read the account of %q", user))
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

// hold reads the record of the hold whose HOLD entry has version.
func (l *Ledger) hold(ctx context.Context, user string, version int64) (ledger.Hold, bool, error) {
	item, err := l.get(ctx, holdKey(user, version))
	if err != nil {
		return ledger.Hold{}, false, fmt.Errorf("get hold %d of %q: %w", version, user, err)
	}
	if len(item) == 0 {
		return ledger.Hold{}, false, nil
	}
	h, err := decodeHold(item)
	return h, err == nil, err
}

// holdByRequest reads the record of the hold of request_id id, which its
// request record finds: not found if the user made no hold of that id. A
// hold's request record without its hold record is an error: the two are
// written together.
func (l *Ledger) holdByRequest(ctx context.Context, user, id string) (ledger.Hold, bool, error) {
	rec, ok, err := l.request(ctx, user, id)
	if err != nil || !ok || rec.Refusal != nil || rec.Type != ledger.EntryHold {
		return ledger.Hold{}, false, err
	}
	h, ok, err := l.hold(ctx, user, rec.Version)
	if err == nil && !ok {
		err = fmt.Errorf("hold %q of %q: its record %s is missing", id, user, holdSK(rec.Version))
	}
	return h, ok, err
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

// Entries returns a page of user's entries in version order, as q asks for
// it, and the token of the next page ("" on the last page); pagetoken.List
// pages, as for every store.
func (l *Ledger) Entries(ctx context.Context, user string, q ledger.EntryQuery) ([]ledger.Entry, string, error) {
	return pagetoken.List(l.tokens, user, q, func(_ ledger.EntryQuery, w pagetoken.Window) ([]ledger.Entry, error) {
		return l.EntriesAfter(ctx, user, w.After, w.Limit)
	})
}

// Holds pages through user's holds in the states q asks for (none: HELD),
// oldest first, read consistently (pagetoken.List pages, as for
// every store). A held hold at or past its expire_time is EXPIRED
// (ledger.Hold.StateAt), and matches states as that. The open holds alone,
// the default, are the account's: one read, however many holds the user
// ever made; other states read the hold records.
func (l *Ledger) Holds(ctx context.Context, user string, q ledger.HoldQuery) ([]ledger.Hold, string, error) {
	return pagetoken.List(l.tokens, user, q, func(q ledger.HoldQuery, w pagetoken.Window) ([]ledger.Hold, error) {
		after, limit := w.After, w.Limit
		now := l.now()
		var page []ledger.Hold
		// take keeps h if it is on this page, and says whether to read on.
		take := func(h ledger.Hold) bool {
			if h.Version > after && q.Matches(h, now) {
				page = append(page, h)
			}
			return len(page) < limit
		}
		if slices.Equal(q.States, []ledger.HoldState{ledger.HoldHeld}) {
			acct, err := l.account(ctx, user)
			if err != nil {
				return nil, err
			}
			for _, h := range acct.Holds {
				if !take(h) {
					break
				}
			}
		} else if err := l.holdRecords(ctx, user, after, take); err != nil {
			return nil, err
		}
		return page, nil
	})
}

// holdRecords calls fn with user's hold records past version after, in
// version order, read consistently, until fn says to stop.
func (l *Ledger) holdRecords(ctx context.Context, user string, after int64, fn func(ledger.Hold) bool) error {
	return l.versions(ctx, user, holdPrefix, after, func() int { return 100 }, func(item map[string]types.AttributeValue) (bool, error) {
		h, err := decodeHold(item)
		return err == nil && fn(h), err
	})
}

// EntriesAfter returns up to limit entries of user with versions above
// after, in version order, read consistently.
func (l *Ledger) EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error) {
	var entries []ledger.Entry
	if limit <= 0 {
		return nil, nil
	}
	err := l.versions(ctx, user, entryPrefix, after, func() int { return limit - len(entries) }, func(item map[string]types.AttributeValue) (bool, error) {
		e, _, err := decodeEntry(item)
		entries = append(entries, e)
		return err == nil && len(entries) < limit, err
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// versions reads user's items of a kind keyed by version (prefix: entries,
// holds) past version after, in version order and consistently, at most
// left() a query (and 1000), and calls fn with each until it says to stop
// or fails.
func (l *Ledger) versions(ctx context.Context, user, prefix string, after int64, left func() int, fn func(map[string]types.AttributeValue) (bool, error)) error {
	var start map[string]types.AttributeValue
	for {
		out, err := l.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &l.table,
			ConsistentRead:         aws.Bool(true),
			KeyConditionExpression: aws.String("PK = :pk AND SK BETWEEN :from AND :to"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk":   ddbattr.S(partitionKey(user)),
				":from": ddbattr.S(fmt.Sprintf("%s%0*d", prefix, versionDigits, after+1)),
				":to":   ddbattr.S(prefix + "99999999999999999999"),
			},
			Limit:             aws.Int32(int32(min(left(), 1000))),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return unavailable(fmt.Errorf("query %s items of %q: %w", prefix, user, err), fmt.Sprintf("read the records of %q", user))
		}
		for _, item := range out.Items {
			if more, err := fn(item); err != nil || !more {
				return err
			}
		}
		if out.LastEvaluatedKey == nil {
			return nil
		}
		start = out.LastEvaluatedKey
	}
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
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": ddbattr.S(accountSK)},
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
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": ddbattr.S(accountSK), ":first": ddbattr.S(entrySK(1))},
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
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": ddbattr.S(accountSK)},
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
