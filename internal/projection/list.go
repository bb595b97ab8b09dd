package projection

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// Items returns all of a user's history items, oldest first.
func (h *History) Items(ctx context.Context, user string) ([]ledger.Entry, error) {
	items, _, err := h.list(ctx, user, listQuery{oldestFirst: true, limit: 1 << 30})
	return items, err
}

// List returns a page of a user's history and the next page's token ("" on
// the last page). It reads the projection, which may trail the ledger by the
// projection lag.
func (h *History) List(ctx context.Context, user string, o ledger.HistoryQuery) ([]ledger.Entry, string, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return nil, "", err
	}
	pageSize, err := ledger.PageSize(o.PageSize)
	if err != nil {
		return nil, "", err
	}
	o.PageSize = pageSize
	if !o.Start.IsZero() && !o.End.IsZero() && !o.Start.Before(o.End) {
		return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "start_time must be before end_time")
	}
	for _, t := range o.Types {
		if _, ok := t.Info(); !ok {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "unknown entry type %q", t)
		}
	}
	q := listQuery{types: o.Types, start: o.Start, end: o.End, oldestFirst: o.OldestFirst, limit: o.PageSize + 1}
	scope := q.tokenScope(user)
	if o.PageToken != "" {
		v, err := h.tokens.Decode(o.PageToken, scope...)
		if err != nil {
			return nil, "", err
		}
		// The service never gives a token after the largest version, nor
		// one before version 1 (newest first, that page is the last one),
		// but the key could make one: the query's bounds would overflow or
		// cross.
		if v < 1 || v == math.MaxInt64 || (!o.OldestFirst && v == 1) {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
				"page_token is not one this service gave for user %q with these filters", user)
		}
		q.after, q.before = v, v
	}
	items, _, err := h.list(ctx, user, q)
	if err != nil {
		return nil, "", err
	}
	if len(items) <= o.PageSize {
		return items, "", nil
	}
	items = items[:o.PageSize]
	return items, h.tokens.Encode(items[len(items)-1].Version, scope...), nil
}

type listQuery struct {
	types       []ledger.EntryType
	start, end  time.Time
	oldestFirst bool
	after       int64 // oldest first: versions above this
	before      int64 // newest first: versions below this (0: none)
	limit       int
}

// tokenScope is what a page token of q pages through: a token is good only
// for the user and the filters it was given for.
func (q listQuery) tokenScope(user string) []string {
	return []string{"ListHistory", user, q.fingerprint()}
}

func (q listQuery) fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "%v|%d|%d|%v", q.types, q.start.UnixNano(), q.end.UnixNano(), q.oldestFirst)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (h *History) list(ctx context.Context, user string, q listQuery) ([]ledger.Entry, bool, error) {
	lo, hi := historySK(1), historyPrefix+"99999999999999999999"
	if q.oldestFirst {
		lo = historySK(q.after + 1)
	} else if q.before > 0 {
		hi = historySK(q.before - 1)
	}
	values := map[string]types.AttributeValue{":pk": s(dynamo.PartitionKey(user)), ":lo": s(lo), ":hi": s(hi)}
	names := map[string]string{}
	var filters []string
	if len(q.types) > 0 {
		var in []string
		for i, t := range q.types {
			k := ":t" + strconv.Itoa(i)
			values[k] = s(string(t))
			in = append(in, k)
		}
		names["#type"] = "type"
		filters = append(filters, "#type IN ("+strings.Join(in, ", ")+")")
	}
	// create_time is stored to the microsecond. For such a time t,
	// t >= start and t < end hold exactly when they hold for the bounds
	// rounded up to the microsecond; cut down instead, an end just past an
	// entry's time would leave the entry out.
	if !q.start.IsZero() {
		values[":start"] = s(ceilMicrosecond(q.start).Format(timeLayout))
		filters = append(filters, "create_time >= :start")
	}
	if !q.end.IsZero() {
		values[":end"] = s(ceilMicrosecond(q.end).Format(timeLayout))
		filters = append(filters, "create_time < :end")
	}
	in := &dynamodb.QueryInput{
		TableName:                 &h.table,
		KeyConditionExpression:    aws.String("PK = :pk AND SK BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: values,
		ScanIndexForward:          aws.Bool(q.oldestFirst),
		Limit:                     aws.Int32(int32(min(max(q.limit, 25), 1000))),
	}
	if len(filters) > 0 {
		in.FilterExpression = aws.String(strings.Join(filters, " AND "))
		if len(names) > 0 {
			in.ExpressionAttributeNames = names
		}
	}
	var out []ledger.Entry
	for len(out) < q.limit {
		res, err := h.db.Query(ctx, in)
		if err != nil {
			return nil, false, fmt.Errorf("query history of %q: %w", user, err)
		}
		for _, item := range res.Items {
			e, _, err := dynamo.DecodeEntry(item)
			if err != nil {
				return nil, false, err
			}
			out = append(out, e)
		}
		if res.LastEvaluatedKey == nil {
			return out, false, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	return out, true, nil
}

// ceilMicrosecond is t in UTC, rounded up to the microsecond.
func ceilMicrosecond(t time.Time) time.Time {
	c := t.UTC().Truncate(time.Microsecond)
	if c.Before(t) {
		c = c.Add(time.Microsecond)
	}
	return c
}
