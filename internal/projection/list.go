package projection

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// Items returns all of a user's history items, oldest first.
func (h *History) Items(ctx context.Context, user string) ([]ledger.Entry, error) {
	items, _, err := h.list(ctx, user, listQuery{oldestFirst: true, limit: 1 << 30})
	return items, err
}

// List returns a page of a user's history and the next page's token ("" on
// the last page). It reads the projection, which may trail the ledger by the
// projection lag; q.Consistent reads it strongly consistent, so that a page
// read after State has every item up to the state's version (an eventually
// consistent Query may not yet see items the consistent state read did).
// pagetoken.List checks the query and pages, as for every history.
func (h *History) List(ctx context.Context, user string, o ledger.HistoryQuery) ([]ledger.Entry, string, error) {
	return pagetoken.List(h.tokens, user, o, func(q ledger.HistoryQuery, w pagetoken.Window) ([]ledger.Entry, error) {
		items, _, err := h.list(ctx, user, listQuery{types: q.Types, start: q.Start, end: q.End, oldestFirst: q.OldestFirst, after: w.After, before: w.Before, limit: w.Limit, consistent: q.Consistent})
		return items, err
	})
}

type listQuery struct {
	types       []ledger.EntryType
	start, end  time.Time
	oldestFirst bool
	after       int64 // oldest first: versions above this
	before      int64 // newest first: versions below this (0: none)
	limit       int
	consistent  bool
}

func (h *History) list(ctx context.Context, user string, q listQuery) ([]ledger.Entry, bool, error) {
	lo, hi := historySK(1), historyPrefix+"99999999999999999999"
	if q.oldestFirst {
		lo = historySK(q.after + 1)
	} else if q.before > 0 {
		hi = historySK(q.before - 1)
	}
	values := map[string]types.AttributeValue{":pk": ddbattr.S(dynamo.PartitionKey(user)), ":lo": ddbattr.S(lo), ":hi": ddbattr.S(hi)}
	names := map[string]string{}
	var filters []string
	if len(q.types) > 0 {
		var in []string
		for i, t := range q.types {
			k := ":t" + strconv.Itoa(i)
			values[k] = ddbattr.S(string(t))
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
		values[":start"] = ddbattr.S(ceilMicrosecond(q.start).Format(timeLayout))
		filters = append(filters, "create_time >= :start")
	}
	if !q.end.IsZero() {
		values[":end"] = ddbattr.S(ceilMicrosecond(q.end).Format(timeLayout))
		filters = append(filters, "create_time < :end")
	}
	in := &dynamodb.QueryInput{
		TableName:                 &h.table,
		KeyConditionExpression:    aws.String("PK = :pk AND SK BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: values,
		ScanIndexForward:          aws.Bool(q.oldestFirst),
		ConsistentRead:            aws.Bool(q.consistent),
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
