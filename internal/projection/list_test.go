package projection

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

func TestListHistoryPagesAndFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	apply := func(typ ledger.EntryType, id, amount, purchase string) { f.apply(t, typ, "u1", id, amount, purchase) }
	apply(ledger.EntryGrant, "g0", "1000", "")
	for i := range 11 {
		apply(ledger.EntryPurchase, fmt.Sprint("p", i), "5", "")
		apply(ledger.EntryRefund, fmt.Sprint("r", i), "1", fmt.Sprint("p", i))
	}
	if err := f.history.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	const total = 23
	pageThroughHistory(t, f, total)

	purchases, _, err := f.history.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: 5}, Types: []ledger.EntryType{ledger.EntryPurchase}})
	if err != nil {
		t.Fatal(err)
	}
	if len(purchases) != 5 || purchases[0].Version != 22 || purchases[0].RefundedAmount.String() != "1" {
		t.Errorf("newest 5 purchases = %d items, first %+v; want 5, version 22, refunded 1", len(purchases), purchases[0])
	}
	for _, e := range purchases {
		if e.Type != ledger.EntryPurchase {
			t.Errorf("type filter let %s through", e.Type)
		}
	}
	all := f.allHistory(t, "u1", true)
	from, to := all[10].CreateTime, all[15].CreateTime
	window, _, err := f.history.List(ctx, "u1", ledger.HistoryQuery{Start: from, End: to, OldestFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(window) == 0 || window[0].Version != 11 || window[len(window)-1].Version != 15 {
		t.Errorf("time window [v11, v16): got %d items from %v", len(window), window)
	}
	// Bounds finer than the stored microsecond: an entry is in the window
	// exactly when start <= create_time < end, compared at full precision.
	for name, o := range map[string]ledger.HistoryQuery{
		"end a nanosecond after an entry":    {Start: all[10].CreateTime, End: all[12].CreateTime.Add(time.Nanosecond)},
		"start a nanosecond after an entry":  {Start: all[10].CreateTime.Add(time.Nanosecond), End: all[15].CreateTime},
		"start a nanosecond before an entry": {Start: all[10].CreateTime.Add(-time.Nanosecond), End: all[12].CreateTime},
	} {
		var want []int64
		for _, e := range all {
			if !e.CreateTime.Before(o.Start) && e.CreateTime.Before(o.End) {
				want = append(want, e.Version)
			}
		}
		o.OldestFirst, o.PageSize = true, ledger.MaxPageSize
		got, _, err := f.history.List(ctx, "u1", o)
		if err != nil {
			t.Fatal(err)
		}
		var versions []int64
		for _, e := range got {
			versions = append(versions, e.Version)
		}
		if len(want) == 0 || !slices.Equal(versions, want) {
			t.Errorf("%s: versions %v, want %v", name, versions, want)
		}
	}

	checkHistoryTokens(t, f, total, from, to)
}

// pageThroughHistory lists u1's history of total items in pages of
// several sizes, both ways, and checks that it gets each version once, in
// order.
func pageThroughHistory(t *testing.T, f *fixture, total int) {
	t.Helper()
	ctx := context.Background()
	for _, oldestFirst := range []bool{true, false} {
		for _, size := range []int{1, 7, 100} {
			var versions []int64
			token := ""
			for pages := 0; ; pages++ {
				if pages > total+1 {
					t.Fatalf("size %d: more pages than items", size)
				}
				page, next, err := f.history.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: size, PageToken: token}, OldestFirst: oldestFirst})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > size {
					t.Fatalf("size %d: page of %d", size, len(page))
				}
				for _, e := range page {
					versions = append(versions, e.Version)
				}
				if token = next; token == "" {
					break
				}
			}
			if len(versions) != total {
				t.Fatalf("oldest first %v, size %d: %d items, want %d", oldestFirst, size, len(versions), total)
			}
			for i, v := range versions {
				want := int64(i + 1)
				if !oldestFirst {
					want = int64(total - i)
				}
				if v != want {
					t.Fatalf("oldest first %v, size %d: item %d has version %d, want %d", oldestFirst, size, i, v, want)
				}
			}
		}
	}
}

// checkHistoryTokens checks that u1's page tokens serve another instance,
// and that tokens made for other queries, users, lists or deployments, or
// altered, and bad filters (an empty window [to, from)) are refused as
// invalid.
func checkHistoryTokens(t *testing.T, f *fixture, total int, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	_, next, err := f.history.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// Another instance, or this one restarted, takes the token.
	restarted := NewHistory(f.env.Client, f.env.History, f.store, nil)
	if page, _, err := restarted.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: 2, PageToken: next}}); err != nil || len(page) != 2 || page[0].Version != int64(total-2) {
		t.Errorf("the next page from another instance: %v, %v; want versions %d and %d", page, err, total-2, total-3)
	}

	newestFirst, oldestFirst := pagetoken.HistoryScope("u1", ledger.HistoryQuery{}), pagetoken.HistoryScope("u1", ledger.HistoryQuery{OldestFirst: true})
	altered := []byte(next)
	altered[10] ^= 'A' ^ 'B' // another base64url digit
	unversioned := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"u":"u1","v":3,"f":%q}`, newestFirst[2]))
	tests := []struct {
		name   string
		user   string // "": u1
		o      ledger.HistoryQuery
		reason string
	}{
		{name: "token with other filters", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: next}, OldestFirst: true}, reason: ledger.ReasonInvalidPageToken},
		{name: "token of another user", user: "u2", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: next}}, reason: ledger.ReasonInvalidPageToken},
		{name: "garbage token", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: "zzz"}}, reason: ledger.ReasonInvalidPageToken},
		{name: "altered token", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: string(altered)}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token of the old format, unversioned", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: unversioned}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token of another deployment", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: pagetoken.Derived("other-history").Encode(3, newestFirst...)}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token of ListEntries", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: f.history.tokens.Encode(3, "ListEntries", "u1")}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token with the key, before version 1, newest first", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: f.history.tokens.Encode(1, newestFirst...)}}, reason: ledger.ReasonInvalidPageToken},
		{name: "token with the key, at version 0", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: f.history.tokens.Encode(0, oldestFirst...)}, OldestFirst: true}, reason: ledger.ReasonInvalidPageToken},
		{name: "token with the key, at the largest version, oldest first", o: ledger.HistoryQuery{Page: ledger.Page{PageToken: f.history.tokens.Encode(math.MaxInt64, oldestFirst...)}, OldestFirst: true}, reason: ledger.ReasonInvalidPageToken},
		{name: "negative page size", o: ledger.HistoryQuery{Page: ledger.Page{PageSize: -1}}, reason: ledger.ReasonInvalidPageSize},
		{name: "empty window", o: ledger.HistoryQuery{Start: to, End: from}, reason: ledger.ReasonInvalidFilter},
		{name: "unknown type", o: ledger.HistoryQuery{Types: []ledger.EntryType{"BONUS"}}, reason: ledger.ReasonInvalidFilter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			user := cmp.Or(tt.user, "u1")
			if _, _, err := f.history.List(ctx, user, tt.o); err == nil {
				t.Error("no error")
			} else if e, ok := ledger.AsError(err); !ok || e.Kind != ledger.KindInvalid || e.Reason != tt.reason {
				t.Errorf("%v, want an invalid-argument error %s", err, tt.reason)
			}
		})
	}
}

// consistentQueries records whether each history Query read consistently.
type consistentQueries struct {
	HistoryAPI
	mu   sync.Mutex
	seen []bool
}

func (q *consistentQueries) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	q.mu.Lock()
	q.seen = append(q.seen, aws.ToBool(in.ConsistentRead))
	q.mu.Unlock()
	return q.HistoryAPI.Query(ctx, in, o...)
}

// A consistent list (ListHistory's min_version) queries with ConsistentRead,
// which DynamoDB Local does not need but DynamoDB does: after the state read
// showed a version, an eventually consistent Query may not have its item.
// Any other list reads eventually consistent, at half the cost.
func TestListHistoryConsistentOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g", "10", "")
	if err := f.history.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	db := &consistentQueries{HistoryAPI: f.env.Client}
	h := NewHistory(db, f.env.History, f.store, nil)
	for _, consistent := range []bool{true, false} {
		db.seen = nil
		items, _, err := h.List(ctx, "u1", ledger.HistoryQuery{Consistent: consistent})
		if err != nil || len(items) != 1 {
			t.Fatalf("list: %v, %v", items, err)
		}
		if len(db.seen) == 0 || slices.Contains(db.seen, !consistent) {
			t.Errorf("list asked consistent %v: queries read consistently %v", consistent, db.seen)
		}
	}
}
