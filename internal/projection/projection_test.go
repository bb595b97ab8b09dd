package projection

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/pagetoken"
	"github.com/pointledger/pointledger/internal/stream"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type fixture struct {
	env     *dynamotest.Env
	store   *dynamo.Ledger
	history *History
	leases  *LeaseTable
	streams stream.StreamsAPI
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := dynamotest.New(t)
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: quiet})
	return &fixture{
		env:     env,
		store:   store,
		history: NewHistory(env.Client, env.History, store, nil),
		leases:  NewLeaseTable(env.Client, env.Leases, nil),
		streams: dynamolocal.NewStreamsClient(env.Endpoint),
	}
}

// testLeaseTTL is long: a renewal slowed down by a busy machine must not
// lose a lease in the middle of a test. A test that hands a lease over moves
// its lease table's clock past the expiry instead of waiting for it.
const testLeaseTTL = time.Minute

// projector returns a projector with short intervals, so tests wait little.
func (f *fixture) projector(owner string, o Options) *Projector {
	o.Owner = owner
	if o.LeaseTTL == 0 {
		o.LeaseTTL = testLeaseTTL
	}
	o.PollInterval, o.DiscoverInterval, o.Logger = 20*time.Millisecond, 100*time.Millisecond, quiet
	return NewProjector(f.env.Ledger, f.env.Client, f.streams, f.leases, f.history, o)
}

// run runs p until the returned stop is called (which does not release its
// leases, like a killed process) and returns what Run returned.
func run(p *Projector) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() error { cancel(); return <-done }
}

func (f *fixture) storm(t *testing.T, users []string, workers, ops int, seed uint64) {
	t.Helper()
	ledgertest.Storm(t, f.store, users, workers, ops, seed)
}

// apply writes one mutation to the ledger.
func (f *fixture) apply(t *testing.T, typ ledger.EntryType, user, id, amount, purchase string) {
	t.Helper()
	m, err := ledger.NewMutation(typ, ledger.Request{UserID: user, RequestID: id, Amount: amount, PurchaseRequestID: purchase}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Apply(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// waitCaughtUp waits until every user's history state has the ledger's
// version. It fails the test after 3 minutes; it asserts nothing about speed.
func (f *fixture) waitCaughtUp(t *testing.T, users []string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Minute)
	for _, u := range users {
		acct, err := f.store.Balance(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for {
			st, err := f.history.State(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			if st.Version >= acct.Version {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("history of %s at version %d, ledger at %d, after 3 minutes", u, st.Version, acct.Version)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// assertHistoryEqualsLedger checks, for each user, that the history has the
// ledger's entries (every attribute, same order, none twice) and that the
// state's totals add up to the ledger's balance, its pending to the
// ledger's pending.
func (f *fixture) assertHistoryEqualsLedger(t *testing.T, users []string) {
	t.Helper()
	ctx := context.Background()
	for _, u := range users {
		want, err := f.store.EntriesAfter(ctx, u, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got := f.allHistory(t, u, true)
		if len(got) != len(want) {
			t.Errorf("%s: history has %d items, ledger %d entries", u, len(got), len(want))
			continue
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%s: history item %d = %+v, ledger entry = %+v", u, i+1, got[i], want[i])
			}
		}
		st, err := f.history.State(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		acct, err := f.store.Balance(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		sum := st.Granted.Sub(st.Spent).Add(st.Refunded).Add(st.Adjusted)
		if st.Version != acct.Version || !st.Balance.Equal(acct.Balance) || !sum.Equal(acct.Balance) || !st.Pending.Equal(acct.Pending) {
			t.Errorf("%s: state version %d balance %s (granted %s - spent %s + refunded %s = %s) pending %s; ledger version %d balance %s pending %s",
				u, st.Version, st.Balance, st.Granted, st.Spent, st.Refunded, sum, st.Pending, acct.Version, acct.Balance, acct.Pending)
		}
	}
}

func (f *fixture) allHistory(t *testing.T, user string, oldestFirst bool) []ledger.Entry {
	t.Helper()
	var all []ledger.Entry
	token := ""
	for {
		page, next, err := f.history.List(context.Background(), user, ledger.HistoryQuery{Page: ledger.Page{PageSize: ledger.MaxPageSize, PageToken: token}, OldestFirst: oldestFirst})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if token = next; token == "" {
			return all
		}
	}
}

func TestHistoryEqualsLedgerAfterAStorm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stop := run(f.projector("p1", Options{}))
	users := ledgertest.Users("u", 20)
	f.storm(t, users, 16, 500, 1)
	f.waitCaughtUp(t, users)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, users)
}

// A storm with pending grants, their maturations and reversals (some of
// pending points, some of matured ones) projects to the ledger's entries,
// and a rebuild writes the same history.
func TestHistoryEqualsLedgerAfterAStormWithReturns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stop := run(f.projector("p1", Options{}))
	users := ledgertest.Users("u", 10)
	ledgertest.StormWithReturns(t, f.store, users, 8, 400, 1)
	time.Sleep(ledgertest.ReturnWindow) // every pending grant is due: the sweeper's maturations go to history too
	for _, u := range users {
		if _, err := f.store.Expire(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	f.waitCaughtUp(t, users)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, users)
	fromStream := f.snapshot(t)
	types := map[string]int{}
	for _, item := range fromStream {
		if typ, ok := item["type"].(*ddbtypes.AttributeValueMemberS); ok {
			types[typ.Value]++
		}
	}
	if types[string(ledger.EntryMaturation)] == 0 || types[string(ledger.EntryReversal)] == 0 {
		t.Errorf("history items by type %v: want maturations and reversals", types)
	}
	if _, err := f.history.RebuildAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	fromLedger := f.snapshot(t)
	for k, want := range fromStream {
		if got := fromLedger[k]; !reflect.DeepEqual(got, want) {
			t.Errorf("item %s: rebuilt %v, from the stream %v", k, got, want)
		}
	}
}

func TestTwoProjectorsShareTheStreamAndTakeOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	type batch struct {
		owner, shard string
	}
	var mu sync.Mutex
	var batches []batch
	record := func(owner string) func(string, int) error {
		return func(shard string, _ int) error {
			mu.Lock()
			batches = append(batches, batch{owner, shard})
			mu.Unlock()
			return nil
		}
	}
	// The leases' clock: a's lease expires when the test moves it, not
	// when a busy machine delays a's renewals.
	var skew atomic.Int64
	f.leases = NewLeaseTable(f.env.Client, f.env.Leases, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	a := f.projector("a", Options{AfterApply: record("a")})
	b := f.projector("b", Options{AfterApply: record("b")})
	users := ledgertest.Users("u", 10)

	stopA := run(a)
	for len(a.Status().Shards) == 0 { // let a take the shard first
		time.Sleep(10 * time.Millisecond)
	}
	stopB := run(b)
	f.storm(t, users, 8, 150, 1)
	f.waitCaughtUp(t, users)
	if len(b.Status().Shards) != 0 {
		t.Fatalf("b holds %v while a's lease is valid", b.Status().Shards)
	}

	// Kill a: its lease is not released, so b must wait for it to expire...
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(testLeaseTTL + time.Second)) // and it has now
	f.storm(t, users, 8, 150, 2)
	f.waitCaughtUp(t, users)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, users)

	// One projector at a time per shard: a's batches, then b's, never mixed.
	mu.Lock()
	defer mu.Unlock()
	seenB := map[string]bool{}
	countB := 0
	for _, bt := range batches {
		switch {
		case bt.owner == "b":
			seenB[bt.shard] = true
			countB++
		case seenB[bt.shard]:
			t.Fatalf("a applied shard %s after b had taken it over", bt.shard)
		}
	}
	if countB == 0 {
		t.Error("b never took over after a was killed")
	}
}

var errCrash = errors.New("crash between apply and checkpoint")

func TestRestartAfterACrashMidBatchResumesFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 10)
	f.storm(t, users, 8, 100, 1)

	var crashedShard string
	var crashedRecords int
	crashing := f.projector("p", Options{AfterApply: func(shard string, records int) error {
		if crashedShard == "" {
			crashedShard, crashedRecords = shard, records
		}
		// The batch is applied, its checkpoint is never written. Run stops
		// only once it hears of the crash, and a discovery meanwhile may
		// take the shard up again: that worker crashes too, as nothing runs
		// on in a crashed process.
		return errCrash
	}})
	if err := crashing.Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("Run = %v, want the crash", err)
	}
	lease, _, err := f.leases.Get(context.Background(), shardKey(crashedShard))
	if err != nil {
		t.Fatal(err)
	}
	if lease.Checkpoint != "" || lease.Owner != "p" {
		t.Fatalf("lease after the crash = %+v, want p's, with no checkpoint", lease)
	}

	// The same process restarted: same owner, so no wait for the lease. It
	// must read the crashed batch again, and apply none of it twice.
	var redelivered atomic.Int64
	restarted := f.projector("p", Options{AfterApply: func(_ string, records int) error {
		redelivered.Add(int64(records))
		return nil
	}})
	stop := run(restarted)
	f.storm(t, users, 8, 50, 2)
	f.waitCaughtUp(t, users)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if redelivered.Load() < int64(crashedRecords) {
		t.Errorf("the restarted projector read %d records, fewer than the %d of the crashed batch", redelivered.Load(), crashedRecords)
	}
	f.assertHistoryEqualsLedger(t, users)
}

// snapshot reads every item of the history table, keyed by PK and SK,
// without the state's update_time (when it was written, not what).
func (f *fixture) snapshot(t *testing.T) map[string]map[string]ddbtypes.AttributeValue {
	t.Helper()
	out := map[string]map[string]ddbtypes.AttributeValue{}
	p := dynamodb.NewScanPaginator(f.env.Client, &dynamodb.ScanInput{TableName: &f.env.History, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			delete(item, "update_time")
			out[fmt.Sprint(item["PK"], item["SK"])] = item
		}
	}
	return out
}

func TestRebuildMakesTheSameHistoryAsTheStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 10)
	stop := run(f.projector("p", Options{}))
	f.storm(t, users, 8, 300, 1)
	f.waitCaughtUp(t, users)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fromStream := f.snapshot(t)

	for _, item := range fromStream {
		if _, err := f.env.Client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: &f.env.History, Key: map[string]ddbtypes.AttributeValue{"PK": item["PK"], "SK": item["SK"]},
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.history.RebuildAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != len(users) {
		t.Errorf("rebuilt %d users, want %d", n, len(users))
	}
	fromLedger := f.snapshot(t)
	if len(fromLedger) != len(fromStream) {
		t.Fatalf("rebuild wrote %d items, the stream %d", len(fromLedger), len(fromStream))
	}
	for k, want := range fromStream {
		if got := fromLedger[k]; !reflect.DeepEqual(got, want) {
			t.Errorf("item %s: rebuilt %v, from the stream %v", k, got, want)
		}
	}
	f.assertHistoryEqualsLedger(t, users)
}

func TestRebuildRepairsAnAlteredHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users := ledgertest.Users("u", 3)
	f.storm(t, users, 4, 60, 1)
	if _, err := f.history.RebuildAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Corrupt: change an amount, add a version the ledger lacks, push the state ahead.
	ctx := context.Background()
	pk := ddbtypes.AttributeValueMemberS{Value: dynamo.PartitionKey("u0")}
	_, err := f.env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &f.env.History,
		Key:                       map[string]ddbtypes.AttributeValue{"PK": &pk, "SK": s(historySK(1))},
		UpdateExpression:          aws.String("SET amount = :a"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":a": &ddbtypes.AttributeValueMemberN{Value: "12345"}}})
	if err != nil {
		t.Fatal(err)
	}
	bogus := f.history.historyItem(ledger.Entry{UserID: "u0", Version: 999, Type: ledger.EntryGrant, Amount: decimal.NewFromInt(1), CreateTime: time.Now()})
	if _, err := f.env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &f.env.History, Item: bogus}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &f.env.History, Item: f.history.stateItem(history.State{UserID: "u0", Version: 999})}); err != nil {
		t.Fatal(err)
	}
	if err := f.history.Rebuild(ctx, "u0"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, users)
}

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

// lossyStream stands between the projector and DynamoDB Local's stream to
// produce what the emulator cannot: an expired iterator, a trimmed answer,
// and records lost to the stream's retention (all up to lostUpTo): an
// iterator after an earlier record is refused as trimmed, and TRIM_HORIZON
// starts after them. (Sequence numbers of DynamoDB Local have a fixed width,
// so they compare as strings.)
type lossyStream struct {
	stream.StreamsAPI
	expireOnce atomic.Bool
	trimOnce   atomic.Bool
	lostUpTo   string
}

func (l *lossyStream) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if l.expireOnce.CompareAndSwap(true, false) {
		return nil, &types.ExpiredIteratorException{Message: aws.String("Iterator expired")}
	}
	if l.trimOnce.CompareAndSwap(true, false) {
		return nil, &types.TrimmedDataAccessException{Message: aws.String("trimmed")}
	}
	return l.StreamsAPI.GetRecords(ctx, in, opts...)
}

func (l *lossyStream) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	switch in.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(l.lostUpTo)
	case types.ShardIteratorTypeAfterSequenceNumber:
		if aws.ToString(in.SequenceNumber) < l.lostUpTo {
			return nil, &types.TrimmedDataAccessException{Message: aws.String("trimmed")}
		}
	default: // LATEST and by time: the projector asks for neither
	}
	return l.StreamsAPI.GetShardIterator(ctx, in, opts...)
}

// shardKey is the lease-table key of the projection's lease of shard.
func shardKey(shard string) string { return stream.ShardKey(stream.ProjectionName, shard) }

// lastSequenceNumber reads the whole stream and returns its newest record's
// sequence number.
func (f *fixture) lastSequenceNumber(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	table, err := f.env.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &f.env.Ledger})
	if err != nil {
		t.Fatal(err)
	}
	arn := table.Table.LatestStreamArn
	ds, err := f.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, sh := range ds.StreamDescription.Shards {
		var it *string
		first, err := f.streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err == nil {
			it = first.ShardIterator
		}
		for err == nil && it != nil {
			var out *dynamodbstreams.GetRecordsOutput
			out, err = f.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it})
			if err != nil || len(out.Records) == 0 {
				break
			}
			last, it = *out.Records[len(out.Records)-1].Dynamodb.SequenceNumber, out.NextShardIterator
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return last
}

func TestTrimmedRecordsAreRecoveredFromTheLedger(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	early, lost, both, late := ledgertest.Users("early", 5), ledgertest.Users("lost", 5), ledgertest.Users("both", 5), ledgertest.Users("late", 5)
	all := slices.Concat(early, lost, both, late)

	// A projector applies the early records and checkpoints them, then stops.
	f.storm(t, early, 4, 60, 1)
	earlyEnd := f.lastSequenceNumber(t)
	first := f.projector("p", Options{})
	stop := run(first)
	f.waitCaughtUp(t, early)
	for deadline := time.Now().Add(3 * time.Minute); ; {
		shards := first.Status().Shards
		if len(shards) == 1 {
			l, _, err := f.leases.Get(context.Background(), shardKey(shards[0]))
			if err != nil {
				t.Fatal(err)
			}
			if l.Checkpoint >= earlyEnd {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the first projector did not checkpoint the early records within 3 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// While none runs, records are written that the stream will lose.
	f.storm(t, slices.Concat(lost, both), 8, 80, 2)
	lossy := &lossyStream{StreamsAPI: f.streams, lostUpTo: f.lastSequenceNumber(t)}
	lossy.expireOnce.Store(true)
	lossy.trimOnce.Store(true)
	f.streams = lossy
	f.storm(t, slices.Concat(both, late), 8, 80, 3)

	// The restarted projector finds its checkpoint trimmed: the lost users
	// can only come from the ledger; the both users have gaps to fill.
	stop = run(f.projector("p", Options{}))
	f.waitCaughtUp(t, all)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if lossy.expireOnce.Load() || lossy.trimOnce.Load() {
		t.Error("the expired and trimmed answers were not injected")
	}
	f.assertHistoryEqualsLedger(t, all)
}

// Refunds reach their purchase's history item through the refund entries:
// two refunds of one purchase applied together make one update of it.
func TestRefundsOfOnePurchaseAppliedTogether(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	apply := func(typ ledger.EntryType, id, amount, purchase string) { f.apply(t, typ, "u1", id, amount, purchase) }
	apply(ledger.EntryGrant, "g", "100", "")
	apply(ledger.EntryPurchase, "p", "30", "")
	apply(ledger.EntryRefund, "r1", "5", "p")
	apply(ledger.EntryRefund, "r2", "7", "p")
	entries, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[:2]); err != nil { // the purchase, as the stream gave it: refunded 0
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[2:]); err != nil { // both refunds in one batch
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries); err != nil { // all again: nothing changes
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// A grant's reversed amount in history is the sum of its reversals applied
// so far, as a purchase's refunded amount is: a pending grant enters history
// at reversed 0 whether it comes from the stream or from the ledger (which
// has counted later reversals on it), each reversal adds to it once, in the
// batch of its grant or after it, of pending points or of matured ones; the
// maturation between them and the state's pending are the ledger's.
func TestReversalsOfAPendingGrantAddToItsReversedAmount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := t0
	store := dynamo.New(f.env.Client, dynamo.Options{Table: f.env.Ledger, Logger: quiet, Now: func() time.Time { return clk }})
	apply := func(typ ledger.EntryType, r ledger.Request) {
		t.Helper()
		r.UserID = "u1"
		ledgertest.Must(t, store, typ, r)
	}
	apply(ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "10", Effective: t0.Add(time.Hour)}) // 1: pending
	apply(ledger.EntryReversal, ledger.Request{RequestID: "rv1", Amount: "3", GrantRequestID: "g"})      // 2: of pending points
	clk = t0.Add(2 * time.Hour)
	apply(ledger.EntryPurchase, ledger.Request{RequestID: "p", Amount: "2"})                        // 3: MATURATION of 7, 4: the purchase
	apply(ledger.EntryReversal, ledger.Request{RequestID: "rv2", Amount: "4", GrantRequestID: "g"}) // 5: of matured points
	entries, err := store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 || entries[2].Type != ledger.EntryMaturation || !entries[0].ReversedAmount.Equal(decimal.NewFromInt(7)) {
		t.Fatalf("ledger entries %+v: want the grant (reversed 7), a reversal, its maturation, the purchase and a reversal", entries)
	}
	if err := f.history.Apply(ctx, entries[:2]); err != nil { // the grant and a reversal in one batch
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[2:]); err != nil { // the other reversal updates the grant's item
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries); err != nil { // all again: nothing changes
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
	matured, _, err := f.history.List(ctx, "u1", ledger.HistoryQuery{Page: ledger.Page{PageSize: 10}, Types: []ledger.EntryType{ledger.EntryMaturation, ledger.EntryReversal}, OldestFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(matured) != 3 || matured[1].GrantRequestID != "g" || !matured[1].PendingChange.Equal(decimal.NewFromInt(-7)) {
		t.Errorf("history of maturations and reversals %+v: want the reversal, the maturation of 7 and the reversal", matured)
	}

	// From the ledger in one go (a gap filled, a rebuild): the grant as the
	// ledger has it now, reversed 7, counts each reversal once.
	other := NewHistory(f.env.Client, f.env.History, store, nil)
	if _, err := f.env.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &f.env.History,
		Key: map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: dynamo.PartitionKey("u1")}, "SK": &ddbtypes.AttributeValueMemberS{Value: stateSK}}}); err != nil {
		t.Fatal(err)
	}
	if err := other.Apply(ctx, entries[1:]); err != nil { // starts with a gap: the grant is read from the ledger
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
	if err := other.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// A capture is refunded as a purchase is: read from the ledger after its
// refund (as a gap is filled), it enters history at refunded 0, and the
// refund adds to it once.
func TestARefundedCaptureReadFromTheLedger(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, r := range []struct {
		typ ledger.EntryType
		req ledger.Request
	}{
		{ledger.EntryGrant, ledger.Request{RequestID: "g", Amount: "100"}},
		{ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "30", Expire: time.Now().Add(time.Hour)}},
		{ledger.EntryCapture, ledger.Request{RequestID: "c", HoldRequestID: "h"}},
		{ledger.EntryRefund, ledger.Request{RequestID: "r", Amount: "12", PurchaseRequestID: "c"}},
	} {
		r.req.UserID = "u1"
		m, err := ledger.NewMutation(r.typ, r.req, ledger.DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries); err != nil { // the capture as the ledger has it: refunded 12
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// A refund whose purchase is missing from history (a corrupted projection)
// fails with an error that says so, instead of retrying as a race.
func TestARefundOfAPurchaseMissingFromHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g", "10", "")
	f.apply(t, ledger.EntryPurchase, "u1", "p", "5", "")
	f.apply(t, ledger.EntryRefund, "u1", "r", "1", "p")
	entries, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, entries[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &f.env.History, Key: map[string]ddbtypes.AttributeValue{
		"PK": s(dynamo.PartitionKey("u1")), "SK": s(historySK(2)),
	}}); err != nil {
		t.Fatal(err)
	}
	err = f.history.Apply(ctx, entries[2:])
	if err == nil || !strings.Contains(err.Error(), "rebuild it") {
		t.Fatalf("applying a refund of a purchase missing from history: %v, want an error that says to rebuild", err)
	}
	if err := f.history.Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// afterRebuildRead runs hook once, right after a rebuild has read the ledger.
type afterRebuildRead struct {
	Ledger
	once sync.Once
	hook func()
}

func (l *afterRebuildRead) EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error) {
	es, err := l.Ledger.EntriesAfter(ctx, user, after, limit)
	if after == 0 {
		l.once.Do(l.hook)
	}
	return es, err
}

// afterWriting runs hook once, right after a write (a put or a transaction)
// of the history item with sort key sk.
type afterWriting struct {
	HistoryAPI
	sk   string
	once sync.Once
	hook func()
}

func (d *afterWriting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := d.HistoryAPI.PutItem(ctx, in, o...)
	if sk, _ := in.Item["SK"].(*ddbtypes.AttributeValueMemberS); err == nil && sk != nil && sk.Value == d.sk {
		d.once.Do(d.hook)
	}
	return out, err
}

func (d *afterWriting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := d.HistoryAPI.TransactWriteItems(ctx, in, o...)
	for _, it := range in.TransactItems {
		if it.Put == nil {
			continue
		}
		if sk, _ := it.Put.Item["SK"].(*ddbtypes.AttributeValueMemberS); err == nil && sk != nil && sk.Value == d.sk {
			d.once.Do(d.hook)
		}
	}
	return out, err
}

// The projector applies an entry between a rebuild's read of the ledger and
// its writes: the entry's history item stays (it is not "extra"), and the
// state stays with it.
func TestRebuildWhileTheProjectorAppliesANewEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g1", "10", "")
	f.apply(t, ledger.EntryPurchase, "u1", "p", "4", "")
	all, err := f.store.EntriesAfter(ctx, "u1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.history.Apply(ctx, all); err != nil { // the projector is at version 2
		t.Fatal(err)
	}
	l := &afterRebuildRead{Ledger: f.store, hook: func() {
		f.apply(t, ledger.EntryRefund, "u1", "r", "3", "p") // version 3, during the rebuild
		es, err := f.store.EntriesAfter(ctx, "u1", 2, 10)
		if err == nil {
			err = f.history.Apply(ctx, es) // ...applied by the projector
		}
		if err != nil {
			t.Error(err)
		}
	}}
	if err := NewHistory(f.env.Client, f.env.History, l, nil).Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// The projector applies a refund after a rebuild rewrote the refunded
// purchase, in the middle of the rebuild: the refund counts once.
func TestRebuildWhileTheProjectorAppliesARefund(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.apply(t, ledger.EntryGrant, "u1", "g1", "10", "")
	f.apply(t, ledger.EntryPurchase, "u1", "p", "4", "")
	for i := range 120 { // the rebuild takes more than one transaction
		f.apply(t, ledger.EntryGrant, "u1", fmt.Sprint("g", i+2), "1", "")
	}
	f.apply(t, ledger.EntryRefund, "u1", "r", "3", "p")
	all, err := f.store.EntriesAfter(ctx, "u1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refund := len(all) - 1
	if err := f.history.Apply(ctx, all[:refund]); err != nil { // the projector is just before the refund
		t.Fatal(err)
	}
	db := &afterWriting{HistoryAPI: f.env.Client, sk: historySK(2), hook: func() {
		if err := f.history.Apply(ctx, all[refund:]); err != nil { // the projector applies the refund
			t.Error(err)
		}
	}}
	if err := NewHistory(db, f.env.History, f.store, nil).Rebuild(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.assertHistoryEqualsLedger(t, []string{"u1"})
}

// endlessScan makes a catch-up's scan of the accounts last until the
// projector stops, as on a big ledger.
type endlessScan struct{ Ledger }

func (endlessScan) Accounts(ctx context.Context, _ int, _ func(ledger.Account) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// waitCheckpoint waits until the lease of p's one shard has a checkpoint at
// or past seq. It fails the test after 3 minutes.
func (f *fixture) waitCheckpoint(t *testing.T, p *Projector, seq string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if sh := p.Status().Shards; len(sh) == 1 {
			l, _, err := f.leases.Get(context.Background(), shardKey(sh[0]))
			if err != nil {
				t.Fatal(err)
			}
			if l.Checkpoint >= seq {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint at %s after 3 minutes", seq)
		}
	}
}

// A projector finds its checkpoint trimmed, asks for a catch-up from the
// ledger, reads on and checkpoints past the loss, and stops before the
// catch-up has finished. The next projector's checkpoint is valid, so only
// the request the first one recorded tells it to catch up.
func TestACatchUpRequestOutlivesTheProjector(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	early, lost, late := ledgertest.Users("early", 3), ledgertest.Users("lost", 3), ledgertest.Users("late", 3)
	f.storm(t, early, 4, 30, 1)
	earlyEnd := f.lastSequenceNumber(t)
	p := f.projector("p", Options{})
	stop := run(p)
	f.waitCheckpoint(t, p, earlyEnd)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	f.storm(t, lost, 4, 30, 2) // the stream loses these
	f.streams = &lossyStream{StreamsAPI: f.streams, lostUpTo: f.lastSequenceNumber(t)}
	f.storm(t, late, 4, 30, 3)
	lateEnd := f.lastSequenceNumber(t)

	p = NewProjector(f.env.Ledger, f.env.Client, f.streams, f.leases, NewHistory(f.env.Client, f.env.History, endlessScan{f.store}, nil),
		Options{Owner: "p", LeaseTTL: testLeaseTTL, PollInterval: 20 * time.Millisecond, DiscoverInterval: 100 * time.Millisecond, Logger: quiet})
	stop = run(p)
	f.waitCheckpoint(t, p, lateEnd)
	if err := stop(); err != nil { // while its catch-up still scans
		t.Fatal(err)
	}
	p.Release(context.Background())

	stop = run(f.projector("p", Options{}))
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	f.waitCaughtUp(t, lost)
	f.assertHistoryEqualsLedger(t, slices.Concat(early, lost, late))
	if n, err := f.leases.CatchUpRequests(context.Background(), stream.CatchUpKey(stream.ProjectionName, f.env.Ledger)); err != nil || n != 0 {
		t.Errorf("catch-up requests left after the catch-up: %d, %v", n, err)
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
