package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testLeaseTTL is long: a renewal slowed down by a busy machine must not
// lose a lease in the middle of a test. A test that hands a lease over moves
// its lease table's clock past the expiry instead of waiting for it.
const testLeaseTTL = time.Minute

type fixture struct {
	env     *dynamotest.Env
	store   *dynamo.Ledger
	leases  *LeaseTable
	streams StreamsAPI
	skew    atomic.Int64 // added to the lease table's clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := dynamotest.New(t)
	f := &fixture{
		env:   env,
		store: dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: quiet}),
		// Read as ledgerd reads it (-lean-writes): GetRecords' pages by
		// ddbwire's decoder.
		streams: leanStreamsClient(env.Endpoint),
	}
	f.leases = NewLeaseTable(env.Client, env.Leases, func() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) })
	return f
}

func leanStreamsClient(endpoint string) *dynamodbstreams.Client {
	o := dynamolocal.NewStreamsClient(endpoint).Options()
	return dynamodbstreams.New(o, ddbwire.LeanGetRecords)
}

// consumer returns a consumer with short intervals, so tests wait little.
func (f *fixture) consumer(name, owner string, h Handler, o Options) *Consumer {
	o.Name, o.Owner, o.LeaseTTL = name, owner, testLeaseTTL
	o.PollInterval, o.DiscoverInterval, o.Logger = 20*time.Millisecond, 100*time.Millisecond, quiet
	return NewConsumer(f.env.Ledger, f.env.Client, f.streams, f.leases, h, o)
}

// run runs c until the returned stop is called (which does not release its
// leases, like a killed process) and returns what Run returned.
func run(c *Consumer) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error { cancel(); return <-done }
}

func mustStop(t *testing.T, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// entryIDs returns the ids of the ledger's entries of users.
func (f *fixture) entryIDs(t *testing.T, users []string) []string {
	t.Helper()
	var ids []string
	for _, u := range users {
		entries, err := f.store.EntriesAfter(context.Background(), u, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// recorder is a Handler that remembers every entry it is given and how
// often, and fails the calls failNext says (a real handler, in process).
type recorder struct {
	mu       sync.Mutex
	times    map[string]int // entry id -> Apply calls that carried it
	failed   []string       // the entries of the calls that failed
	failNext atomic.Int64   // how many of the next calls fail
}

var errRefused = errors.New("the handler refused the batch")

func (r *recorder) Apply(_ context.Context, entries []ledger.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.times == nil {
		r.times = map[string]int{}
	}
	for _, e := range entries {
		r.times[e.ID]++
	}
	if r.failNext.Add(-1) >= 0 {
		for _, e := range entries {
			r.failed = append(r.failed, e.ID)
		}
		return errRefused
	}
	r.failNext.Store(0)
	return nil
}

func (r *recorder) seen() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.times)
}

// waitHandled waits until every id was handled by one of rs. It fails
// the test after 3 minutes; it asserts nothing about speed.
func waitHandled(t *testing.T, ids []string, rs ...*recorder) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		missing := 0
		for _, id := range ids {
			if !slices.ContainsFunc(rs, func(r *recorder) bool { return r.seen()[id] > 0 }) {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries not handled after 3 minutes", missing, len(ids))
		}
	}
}

func waitShards(t *testing.T, c *Consumer) []string {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if sh := c.Status().Shards; len(sh) > 0 {
			return sh
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s took no shard within 3 minutes", c.Name(), c.Owner())
		}
	}
}

func TestConsumersOfTwoNamesEachSeeEveryEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	history, deliveries := &recorder{}, &recorder{}
	a := f.consumer("history", "a", history, Options{})
	b := f.consumer("deliveries", "b", deliveries, Options{})
	stopA, stopB := run(a), run(b)
	users := ledgertest.Users("u", 10)
	ledgertest.Storm(t, f.store, users, 8, 200, 1)
	ids := f.entryIDs(t, users)
	waitHandled(t, ids, history)
	waitHandled(t, ids, deliveries)
	// Each holds every shard, under its own name, at once.
	if sa, sb := a.Status().Shards, b.Status().Shards; len(sa) == 0 || !slices.Equal(sa, sb) {
		t.Errorf("shards held: history %v, deliveries %v; want the same, all of them", sa, sb)
	}
	mustStop(t, stopA)
	mustStop(t, stopB)
	for _, sh := range a.Status().Shards {
		for name, owner := range map[string]string{"history": "a", "deliveries": "b"} {
			l, ok, err := f.leases.Get(context.Background(), ShardKey(name, sh))
			if err != nil || !ok || l.Owner != owner || l.Checkpoint == "" {
				t.Errorf("lease %s = %+v (found %v, %v), want %s's with a checkpoint", ShardKey(name, sh), l, ok, err, owner)
			}
		}
	}
	if st := a.Status(); st.Applied < int64(len(ids)) || st.NewestApplied.IsZero() || st.LagText == "" {
		t.Errorf("history's status = %+v, want at least %d entries applied, the newest's time and the lag", st, len(ids))
	}
}

// Two consumers of one name: one holds the shard, the other waits for its
// lease; killed, the first one's shard is taken over from its checkpoint.
func TestConsumersOfOneNameShareTheShards(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ra, rb := &recorder{}, &recorder{}
	a := f.consumer("dispatch", "a", ra, Options{})
	b := f.consumer("dispatch", "b", rb, Options{})
	stopA := run(a)
	waitShards(t, a) // let a take the shard first
	stopB := run(b)
	users := ledgertest.Users("u", 10)
	ledgertest.Storm(t, f.store, users, 8, 150, 1)
	first := f.entryIDs(t, users)
	waitHandled(t, first, ra)
	f.waitCheckpoint(t, "dispatch", f.lastSequenceNumber(t))
	if sh := b.Status().Shards; len(sh) != 0 {
		t.Fatalf("b holds %v while a's lease is valid", sh)
	}

	// Kill a: its lease is not released, so b must wait for it to expire...
	mustStop(t, stopA)
	f.skew.Store(int64(testLeaseTTL + time.Second)) // and it has now
	ledgertest.Storm(t, f.store, users, 8, 150, 2)
	all := f.entryIDs(t, users)
	second := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return slices.Contains(first, id) })
	waitHandled(t, second, rb)
	mustStop(t, stopB)

	// b went on from a's checkpoint: none of a's checkpointed entries again.
	for id, n := range rb.seen() {
		if slices.Contains(first, id) {
			t.Errorf("b handled entry %s (%d times), which a had checkpointed", id, n)
		}
	}
	for id := range ra.seen() {
		if slices.Contains(second, id) {
			t.Errorf("a handled entry %s, written after it was killed", id)
		}
	}
}

// A batch whose Apply fails is not checkpointed: it is read again, and no
// entry is skipped.
func TestAFailedBatchIsReadAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := &recorder{}
	r.failNext.Store(2)
	stop := run(f.consumer("dispatch", "a", r, Options{}))
	users := ledgertest.Users("u", 5)
	ledgertest.Storm(t, f.store, users, 4, 60, 1)
	ids := f.entryIDs(t, users)
	waitHandled(t, ids, r)
	f.waitCheckpoint(t, "dispatch", f.lastSequenceNumber(t))
	mustStop(t, stop)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failed) == 0 {
		t.Fatal("no Apply failed")
	}
	for _, id := range r.failed {
		if r.times[id] < 2 {
			t.Errorf("entry %s of a failed batch was handled %d times, want it read again", id, r.times[id])
		}
	}
}

func TestFanOutFeedsEveryHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first, second := &recorder{}, &recorder{}
	second.failNext.Store(1) // the batch is read again, for both
	c := f.consumer("ledgerd", "a", FanOut(first, second), Options{})
	stop := run(c)
	users := ledgertest.Users("u", 5)
	ledgertest.Storm(t, f.store, users, 4, 60, 1)
	ids := f.entryIDs(t, users)
	waitHandled(t, ids, first)
	waitHandled(t, ids, second)
	mustStop(t, stop)
	if len(second.failed) == 0 {
		t.Fatal("the second handler never failed")
	}
	for _, id := range second.failed {
		if n := first.seen()[id]; n < 2 {
			t.Errorf("entry %s, refused by the second handler, reached the first %d times, want again", id, n)
		}
	}
}

// catchUpRecorder is a recorder that can catch up (and counts how often).
type catchUpRecorder struct {
	recorder
	catchUps atomic.Int64
}

func (r *catchUpRecorder) CatchUp(context.Context) (int, error) {
	r.catchUps.Add(1)
	return 0, nil
}

func TestFanOutCatchesUpTheHandlersThatCan(t *testing.T) {
	t.Parallel()
	a, b := &catchUpRecorder{}, &catchUpRecorder{}
	if _, err := FanOut(a, &recorder{}, b).CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.catchUps.Load() != 1 || b.catchUps.Load() != 1 {
		t.Errorf("catch-ups: %d and %d, want one each", a.catchUps.Load(), b.catchUps.Load())
	}
}

// trimmedOnce refuses the first iterator after a sequence number as
// trimmed, as the stream does for a checkpoint older than its 24 hours
// (which DynamoDB Local cannot produce).
type trimmedOnce struct {
	StreamsAPI
	done atomic.Bool
}

func (s *trimmedOnce) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if in.ShardIteratorType == types.ShardIteratorTypeAfterSequenceNumber && s.done.CompareAndSwap(false, true) {
		return nil, &types.TrimmedDataAccessException{Message: aws.String("trimmed")}
	}
	return s.StreamsAPI.GetShardIterator(ctx, in, opts...)
}

// A checkpoint the stream no longer keeps: a handler that can catch up is
// asked to, through a request in the lease table; one that cannot is not,
// and both read on.
func TestATrimmedCheckpointAsksTheHandlerToCatchUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		canCatch bool
	}{{"catch-upper", true}, {"plain", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			users := ledgertest.Users("u", 3)
			ledgertest.Storm(t, f.store, users, 2, 20, 1)
			stop := run(f.consumer("dispatch", "a", &recorder{}, Options{}))
			f.waitCheckpoint(t, "dispatch", f.lastSequenceNumber(t))
			mustStop(t, stop)

			trimmed := &trimmedOnce{StreamsAPI: f.streams}
			f.streams = trimmed
			var h Handler = &recorder{}
			cu := &catchUpRecorder{}
			if tc.canCatch {
				h = cu
			}
			stop = run(f.consumer("dispatch", "a", h, Options{}))
			late := ledgertest.Users("late", 3)
			ledgertest.Storm(t, f.store, late, 2, 20, 2)
			rec := &cu.recorder
			if !tc.canCatch {
				rec = h.(*recorder)
			}
			waitHandled(t, f.entryIDs(t, late), rec) // it reads on
			key := CatchUpKey("dispatch", f.env.Ledger)
			if tc.canCatch { // asked, answered, and the request cleared
				for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
					n, err := f.leases.CatchUpRequests(context.Background(), key)
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 && cu.catchUps.Load() > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after 3 minutes: %d catch-ups, %d requests waiting", cu.catchUps.Load(), n)
					}
				}
			}
			mustStop(t, stop)
			if !trimmed.done.Load() {
				t.Fatal("the trimmed answer was not injected")
			}
			if !tc.canCatch { // never asked: nobody would answer
				l, ok, err := f.leases.Get(context.Background(), key)
				if err != nil || ok {
					t.Errorf("a catch-up request was recorded for a handler that cannot catch up: %+v, %v", l, err)
				}
			}
		})
	}
}

// waitCheckpoint waits until the lease of the one shard of the consumers
// called name has a checkpoint at or past seq. It fails the test after 3
// minutes.
func (f *fixture) waitCheckpoint(t *testing.T, name, seq string) {
	t.Helper()
	shard := f.shardIDs(t)[0]
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		l, _, err := f.leases.Get(context.Background(), ShardKey(name, shard))
		if err != nil {
			t.Fatal(err)
		}
		if l.Checkpoint >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint at %s after 3 minutes (lease %+v)", seq, l)
		}
	}
}

func (f *fixture) streamArn(t *testing.T) *string {
	t.Helper()
	out, err := f.env.Client.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: &f.env.Ledger})
	if err != nil {
		t.Fatal(err)
	}
	return out.Table.LatestStreamArn
}

// shardIDs lists the stream's shards; these tests expect DynamoDB Local's
// one.
func (f *fixture) shardIDs(t *testing.T) []string {
	t.Helper()
	out, err := f.streams.DescribeStream(context.Background(), &dynamodbstreams.DescribeStreamInput{StreamArn: f.streamArn(t)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sh := range out.StreamDescription.Shards {
		ids = append(ids, *sh.ShardId)
	}
	if len(ids) != 1 {
		t.Fatalf("the stream has shards %v, want one (DynamoDB Local's)", ids)
	}
	return ids
}

// lastSequenceNumber reads the whole stream and returns its newest record's
// sequence number.
func (f *fixture) lastSequenceNumber(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var last string
	for _, shard := range f.shardIDs(t) {
		first, err := f.streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: f.streamArn(t), ShardId: &shard, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		for it := first.ShardIterator; it != nil; {
			out, err := f.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Records) == 0 {
				break
			}
			last, it = *out.Records[len(out.Records)-1].Dynamodb.SequenceNumber, out.NextShardIterator
		}
	}
	return last
}

func TestKeysOfTheProjectionKeepTheirFormAndOthersHaveTheirName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, got, want string }{
		// The form the projection wrote before consumers had names: an
		// upgraded ledgerd must find its checkpoints there.
		{"projection shard", ShardKey(ProjectionName, "shardId-1"), "SHARD#shardId-1"},
		{"projection catch-up", CatchUpKey(ProjectionName, "ledger"), "CATCHUP#ledger"},
		{"dispatch shard", ShardKey("dispatch", "shardId-1"), "dispatch#SHARD#shardId-1"},
		{"dispatch catch-up", CatchUpKey("dispatch", "ledger"), "dispatch#CATCHUP#ledger"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestAConsumerNeedsAName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "a#b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewConsumer took the name %q", name)
				}
			}()
			NewConsumer("ledger", nil, nil, nil, &recorder{}, Options{Name: name})
		}()
	}
}

func TestLeaseIsTakenOverOnlyAfterExpiry(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	leases := NewLeaseTable(env.Client, env.Leases, clock)
	ctx := context.Background()

	a, err := leases.Acquire(ctx, "k", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Acquire(ctx, "k", "b", 10*time.Second); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("b took a valid lease of a: %v", err)
	}
	now = now.Add(9 * time.Second)
	if a, err = leases.Checkpoint(ctx, a, 10*time.Second, "seq-1", false); err != nil {
		t.Fatal(err)
	}
	now = now.Add(9 * time.Second) // 18 s after a took it, 9 s after it renewed
	if _, err := leases.Acquire(ctx, "k", "b", 10*time.Second); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("b took a lease a renewed: %v", err)
	}
	now = now.Add(2 * time.Second) // expired
	b, err := leases.Acquire(ctx, "k", "b", 10*time.Second)
	if err != nil {
		t.Fatalf("b could not take an expired lease: %v", err)
	}
	if b.Checkpoint != "seq-1" || b.Owner != "b" {
		t.Errorf("b's lease = %+v, want a's checkpoint", b)
	}
	if _, err := leases.Renew(ctx, a, 10*time.Second); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("a renewed a lease b took over: %v", err)
	}
	if _, err := leases.Checkpoint(ctx, a, 10*time.Second, "seq-2", false); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("a checkpointed a lease b took over: %v", err)
	}
	if err := leases.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Acquire(ctx, "k", "c", 10*time.Second); err != nil {
		t.Errorf("c could not take a released lease: %v", err)
	}
}

// gate is a handler that says it started and waits, in Apply, until the
// other gate has started too.
type gate struct {
	started chan struct{}
	other   *gate
}

func (g *gate) Apply(ctx context.Context, _ []ledger.Entry) error {
	close(g.started)
	select {
	case <-g.other.started:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the other handler never started while this one applied: %w", ctx.Err())
	}
}

func TestFanOutAppliesAtOnce(t *testing.T) {
	t.Parallel()
	a, b := &gate{started: make(chan struct{})}, &gate{started: make(chan struct{})}
	a.other, b.other = b, a
	// The minute only ends a deadlock, should the handlers run one after
	// the other: each waits for the other to start.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := FanOut(a, b).Apply(ctx, nil); err != nil {
		t.Fatalf("FanOut: %v (the handlers ran one after the other)", err)
	}
}

// spacing records, by shard, when each GetRecords call began and when
// it answered (the shard known by the iterator that GetShardIterator,
// then each answer, gave).
type spacing struct {
	StreamsAPI
	mu    sync.Mutex
	shard map[string]string      // iterator -> shard
	calls map[string][]time.Time // shard -> its reads' starts
	ends  map[string][]time.Time // shard -> its reads' answers
}

func (s *spacing) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	out, err := s.StreamsAPI.GetShardIterator(ctx, in, opts...)
	if err == nil && out.ShardIterator != nil {
		s.mu.Lock()
		s.shard[*out.ShardIterator] = *in.ShardId
		s.mu.Unlock()
	}
	return out, err
}

func (s *spacing) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	s.mu.Lock()
	shard := s.shard[*in.ShardIterator]
	s.calls[shard] = append(s.calls[shard], time.Now())
	s.mu.Unlock()
	out, err := s.StreamsAPI.GetRecords(ctx, in, opts...)
	s.mu.Lock()
	if err == nil && out.NextShardIterator != nil {
		s.shard[*out.NextShardIterator] = shard
	}
	s.ends[shard] = append(s.ends[shard], time.Now())
	s.mu.Unlock()
	return out, err
}

// With a ReadInterval, a shard's next read starts at least the interval
// after the last one answered, even while records come (without one, the
// next read follows a page with records at once, and an empty one after
// the 20 ms PollInterval). The consumer's clock starts after the answer
// this wrapper saw, so however busy the machine, the gap is not shorter.
func TestReadIntervalSpacesTheReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sp := &spacing{StreamsAPI: f.streams, shard: map[string]string{}, calls: map[string][]time.Time{}, ends: map[string][]time.Time{}}
	f.streams = sp
	const interval = 300 * time.Millisecond
	rec := &recorder{}
	stop := run(f.consumer("spaced", "a", rec, Options{ReadInterval: interval}))
	users := ledgertest.Users("s", 5)
	ledgertest.Storm(t, f.store, users, 4, 100, 1)
	waitHandled(t, f.entryIDs(t, users), rec)
	mustStop(t, stop)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	most := 0
	for shard, calls := range sp.calls {
		most = max(most, len(calls))
		ends := sp.ends[shard]
		for i := 1; i < len(calls) && i <= len(ends); i++ {
			if gap := calls[i].Sub(ends[i-1]); gap < interval {
				t.Errorf("shard %s: read %d began %v after read %d answered, want at least %v", shard, i, gap, i-1, interval)
			}
		}
	}
	if most < 2 {
		t.Errorf("at most %d reads of a shard: nothing to space", most)
	}
}
