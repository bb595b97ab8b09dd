package projection

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
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
