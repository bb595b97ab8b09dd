package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pointledger/pointledger/internal/consumerstatus"
	"github.com/pointledger/pointledger/internal/shardpass"
)

// StreamsAPI is the part of the DynamoDB Streams client a consumer uses.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// TableAPI finds the ledger table's stream.
type TableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Options configure a Consumer. Zero values take the defaults, but for Name.
type Options struct {
	// Name names the consumer in the lease table: consumers of one name
	// share the stream's shards, one lease each, and consumers of two names
	// each read every shard. Required; no "#" (it separates a key's parts).
	Name         string
	Owner        string        // this process's name in the lease table; default host-pid-random
	LeaseTTL     time.Duration // a lease not renewed for this long may be taken over; default 10s
	PollInterval time.Duration // wait after an empty read of a shard; default 250ms
	// ReadInterval is the least time from one read of a shard's answer
	// to the next read while records come (0: the next read at once): fewer, larger
	// batches, each handler's per-batch work and the stream's per-call
	// cost paid less often, for at most this much more lag.
	ReadInterval     time.Duration
	DiscoverInterval time.Duration // how often to look for shards and free leases; default 2s
	Logger           *slog.Logger

	// AfterApply, if set, runs after a batch is applied and before its
	// checkpoint; an error stops the consumer there, as a crash would.
	// (Any other failure of a shard is logged, and the shard resumes from
	// its checkpoint at the next discovery.)
	AfterApply func(shardID string, records int) error
}

// Consumer reads the ledger table's stream and hands the new entries to a
// Handler. Several consumers (processes) of one name may run against one
// stream: each shard is read by the one holding its lease, a shard only
// after its parent is finished, and a checkpoint is written only after the
// handler has applied its records. See the package doc for what holds.
type Consumer struct {
	table   string
	tables  TableAPI
	streams StreamsAPI
	leases  *LeaseTable
	handler Handler
	o       Options
	log     *slog.Logger

	fatal    chan error
	catchUp  chan struct{}
	mu       sync.Mutex
	shards   map[string]*shardState // by shard id, while this consumer holds it
	applied  int64
	lastLag  time.Duration
	lastSeen time.Time // create_time of the newest entry applied
	lastPass time.Time // when the consumer last applied or found nothing new
}

type shardState struct {
	lease    *Held
	caughtUp bool // the last read returned nothing new
}

// DefaultOwner names this process as a lease owner: the host, the pid and
// a random part, so that a restarted process is another owner.
func DefaultOwner() string { return shardpass.DefaultOwner() }

// NewConsumer returns a consumer of the stream of table that hands its
// entries to h. It panics if o.Name is empty or holds a "#": that is a
// mistake in the wiring, and a consumer without a name of its own would
// take another's leases.
func NewConsumer(table string, tables TableAPI, streams StreamsAPI, leases *LeaseTable, h Handler, o Options) *Consumer {
	if o.Name == "" || strings.Contains(o.Name, "#") {
		panic(fmt.Sprintf("stream: consumer name %q: want a name without #", o.Name))
	}
	if o.Owner == "" {
		o.Owner = DefaultOwner()
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.DiscoverInterval <= 0 {
		o.DiscoverInterval = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Consumer{
		table: table, tables: tables, streams: streams, leases: leases, handler: h, o: o,
		log:     o.Logger.With("consumer", o.Name, "owner", o.Owner),
		fatal:   make(chan error, 1),
		catchUp: make(chan struct{}, 1),
		shards:  map[string]*shardState{},
	}
}

// Name is the consumer's name in the lease table.
func (c *Consumer) Name() string { return c.o.Name }

// Owner is the name this consumer holds leases under.
func (c *Consumer) Owner() string { return c.o.Owner }

// Run consumes until ctx ends (returning nil) or an AfterApply hook fails.
// Leases it holds are not released: call Release for a clean handover.
func (c *Consumer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // stop the workers, then wait for them
	if _, ok := c.handler.(CatchUpper); ok {
		wg.Go(func() { c.catchUpLoop(ctx) })
	}
	tick := time.NewTicker(c.o.DiscoverInterval)
	defer tick.Stop()
	for {
		if err := c.discover(ctx, &wg); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "shard discovery failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-c.fatal:
			return err
		case <-tick.C:
		}
	}
}

// Release gives up the leases this consumer holds, so that others take
// the shards over at once. Call it after Run returns.
func (c *Consumer) Release(ctx context.Context) {
	c.mu.Lock()
	held := slices.Collect(maps.Values(c.shards))
	c.mu.Unlock()
	for _, sh := range held {
		if sh.lease == nil {
			continue // its worker never started
		}
		if err := sh.lease.Release(ctx); err != nil {
			c.log.WarnContext(ctx, "release lease", "lease", sh.lease.Lease().Key, "error", err)
		}
	}
}

func (c *Consumer) streamArn(ctx context.Context) (string, error) {
	out, err := c.tables.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &c.table})
	if err != nil {
		return "", fmt.Errorf("describe table %s: %w", c.table, err)
	}
	if out.Table.LatestStreamArn == nil {
		return "", fmt.Errorf("table %s has no stream", c.table)
	}
	return *out.Table.LatestStreamArn, nil
}

// discover lists the stream's shards and starts a worker for each shard that
// is ready (not finished, parent finished) and whose lease it can take.
func (c *Consumer) discover(ctx context.Context, wg *sync.WaitGroup) error {
	arn, err := c.streamArn(ctx)
	if err != nil {
		return err
	}
	shards, err := c.listShards(ctx, arn)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, sh := range shards {
		listed[*sh.ShardId] = true
	}
	for _, sh := range shards {
		id := *sh.ShardId
		c.mu.Lock()
		_, mine := c.shards[id]
		c.mu.Unlock()
		if mine {
			continue
		}
		lease, taken, err := c.take(ctx, sh, listed)
		if err != nil {
			return err
		}
		if !taken {
			continue
		}
		st := &shardState{}
		c.mu.Lock()
		c.shards[id] = st
		c.mu.Unlock()
		wg.Go(func() { c.work(ctx, arn, id, st, lease) })
	}
	return nil
}

func (c *Consumer) listShards(ctx context.Context, arn string) ([]types.Shard, error) {
	var shards []types.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: &arn}
	for {
		out, err := c.streams.DescribeStream(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("describe stream: %w", err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if out.StreamDescription.LastEvaluatedShardId == nil {
			return shards, nil
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
}

// take acquires the lease of sh if the shard is ready: not finished, and
// its parent finished or trimmed (listed has the shards still in the
// stream). taken is false if it is not ready or another owner holds it.
func (c *Consumer) take(ctx context.Context, sh types.Shard, listed map[string]bool) (lease Lease, taken bool, err error) {
	id := *sh.ShardId
	lease, _, err = c.leases.Get(ctx, ShardKey(c.o.Name, id))
	if err != nil || lease.Finished {
		return lease, false, err
	}
	// A child waits for its parent. A parent no longer in the stream was
	// trimmed: if it was not finished, its records are lost to the stream
	// and the ledger must supply them.
	parentLost := false
	if parent := aws.ToString(sh.ParentShardId); parent != "" {
		pl, _, err := c.leases.Get(ctx, ShardKey(c.o.Name, parent))
		if err != nil {
			return lease, false, err
		}
		switch {
		case pl.Finished:
		case listed[parent]:
			return lease, false, nil
		default:
			parentLost = true
		}
	}
	lease, err = c.leases.Acquire(ctx, ShardKey(c.o.Name, id), c.o.Owner, c.o.LeaseTTL)
	if errors.Is(err, ErrLeaseHeld) {
		return lease, false, nil
	}
	if err != nil {
		return lease, false, err
	}
	c.log.InfoContext(ctx, "shard lease taken", "shard", id, "checkpoint", lease.Checkpoint)
	if parentLost && lease.Checkpoint == "" {
		c.log.ErrorContext(ctx, "parent shard was trimmed before it was finished; catching up from the ledger", "shard", id, "parent", aws.ToString(sh.ParentShardId))
		if err := c.requestCatchUp(ctx); err != nil {
			return lease, false, err
		}
	}
	return lease, true, nil
}

// work processes a shard whose lease was taken until it ends, and says
// what stopped it.
func (c *Consumer) work(ctx context.Context, arn, id string, st *shardState, lease Lease) {
	err := c.process(ctx, arn, id, st, lease)
	if ctx.Err() == nil {
		// Still held on shutdown, so that Release can hand it over.
		c.mu.Lock()
		delete(c.shards, id)
		c.mu.Unlock()
	}
	var crash *hookError
	switch {
	case err == nil, ctx.Err() != nil:
	case errors.Is(err, ErrLeaseLost):
		c.log.WarnContext(ctx, "shard lease lost", "shard", id, "error", err)
	case errors.As(err, &crash):
		select {
		case c.fatal <- fmt.Errorf("shard %s: %w", id, crash.err):
		default:
		}
	default:
		// Still this consumer's lease: the next discovery takes the
		// shard up again from its checkpoint.
		c.log.ErrorContext(ctx, "shard failed; resuming from its checkpoint", "shard", id, "error", err)
	}
}

// ProjectionName is the projection's consumer name. Its lease-table keys
// keep the form they had before consumers had names ("SHARD#<shard>",
// "CATCHUP#<table>"), so that an upgraded ledgerd goes on from the
// projection's checkpoints and its catch-up requests, and projectors of
// both versions share the shards during a rolling upgrade.
const ProjectionName = "projection"

// keyPrefix starts the lease-table keys of the consumer called name.
func keyPrefix(name string) string {
	if name == ProjectionName {
		return ""
	}
	return name + "#"
}

// ShardKey is the lease-table key of the lease of shard of the consumers
// called name: "<name>#SHARD#<shard>" ("SHARD#<shard>" for the projection).
func ShardKey(name, shard string) string { return keyPrefix(name) + "SHARD#" + shard }

// CatchUpKey is the lease-table key of the catch-up requests of the
// consumers called name of table's stream: "<name>#CATCHUP#<table>"
// ("CATCHUP#<table>" for the projection).
func CatchUpKey(name, table string) string { return keyPrefix(name) + "CATCHUP#" + table }

// hookError is an error of Options.AfterApply: it stops the consumer, as
// the crash it stands for would.
type hookError struct{ err error }

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// process reads one shard from its checkpoint until the shard ends, the
// lease is lost, or ctx ends.
func (c *Consumer) process(ctx context.Context, arn, shardID string, st *shardState, taken Lease) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := c.leases.Hold(taken, c.o.LeaseTTL, func(err error) {
		if errors.Is(err, ErrLeaseLost) {
			cancel(err)
		}
	})
	defer held.Stop()
	c.mu.Lock()
	st.lease = held
	c.mu.Unlock()
	if t, ok := c.handler.(ShardTaker); ok {
		t.ShardTaken(shardID)
	}
	lease := held.Lease

	iter, err := c.iterator(ctx, arn, shardID, lease().Checkpoint)
	if err != nil {
		return err
	}
	trims := 0 // trimmed answers in a row
	var lastRead time.Time
	for {
		if wait := c.o.ReadInterval - time.Since(lastRead); c.o.ReadInterval > 0 && wait > 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(wait):
			}
		}
		out, err := c.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter}, entryImages)
		lastRead = time.Now()
		var expired *types.ExpiredIteratorException
		var trimmed *types.TrimmedDataAccessException
		if err == nil {
			trims = 0
		}
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.As(err, &expired):
			c.log.InfoContext(ctx, "shard iterator expired; resuming from the checkpoint", "shard", shardID)
			if iter, err = c.iterator(ctx, arn, shardID, lease().Checkpoint); err != nil {
				return err
			}
			continue
		case errors.As(err, &trimmed):
			// The iterator points at records the stream no longer has. That
			// proves a loss only if the checkpoint itself is gone, which
			// iterator finds out (and then catches up from the ledger). A
			// trimmed answer that keeps coming back is treated as a loss too.
			// (DynamoDB Local answers so, spuriously, for the first records
			// of a shard that was polled empty for a while.)
			// Without a checkpoint the iterator reads from the oldest record
			// kept, so nothing can have been lost: that answer is the
			// emulator's, not news for the operator.
			switch trims++; {
			case trims > 3:
				c.log.ErrorContext(ctx, "stream keeps answering trimmed; catching up from the ledger", "shard", shardID, "error", err)
				if err := c.requestCatchUp(ctx); err != nil {
					return err
				}
				trims = 0
			case lease().Checkpoint == "":
				c.log.DebugContext(ctx, "stream answered trimmed before the first record; reading the shard from its start again", "shard", shardID, "error", err)
			default:
				c.log.InfoContext(ctx, "stream answered trimmed; resuming from the checkpoint", "shard", shardID, "error", err)
			}
			if iter, err = c.iterator(ctx, arn, shardID, lease().Checkpoint); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("get records: %w", err)
		}

		finished, err := c.applyPage(ctx, shardID, st, held, out)
		if err != nil {
			return err
		}
		if finished {
			c.log.InfoContext(ctx, "shard finished", "shard", shardID)
			return nil
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(c.o.PollInterval):
			}
		}
	}
}

// applyPage applies a page of a shard's records and checkpoints past them
// (or marks the shard finished, after its last page), and says whether the
// shard is finished.
func (c *Consumer) applyPage(ctx context.Context, shardID string, st *shardState, held *Held, out *dynamodbstreams.GetRecordsOutput) (finished bool, err error) {
	if len(out.Records) > 0 {
		if err := c.apply(ctx, out.Records); err != nil {
			return false, err
		}
		if c.o.AfterApply != nil {
			if err := c.o.AfterApply(shardID, len(out.Records)); err != nil {
				return false, &hookError{err}
			}
		}
	}
	finished = out.NextShardIterator == nil
	if len(out.Records) > 0 || finished {
		seq := held.Lease().Checkpoint
		if len(out.Records) > 0 {
			seq = aws.ToString(out.Records[len(out.Records)-1].Dynamodb.SequenceNumber)
		}
		if err := held.Checkpoint(ctx, seq, finished); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	st.caughtUp = len(out.Records) == 0
	c.lastPass = time.Now()
	c.mu.Unlock()
	return finished, nil
}

func (c *Consumer) iterator(ctx context.Context, arn, shardID, checkpoint string) (*string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &shardID, ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
	if checkpoint != "" {
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, &checkpoint
	}
	out, err := c.streams.GetShardIterator(ctx, in)
	var trimmed *types.TrimmedDataAccessException
	if errors.As(err, &trimmed) && checkpoint != "" {
		// Records after the checkpoint are gone (the stream keeps 24 hours):
		// read on from the oldest kept, and bring every user that is behind
		// up to date from the ledger.
		c.log.ErrorContext(ctx, "checkpoint is older than the stream keeps; catching up from the ledger", "shard", shardID, "checkpoint", checkpoint)
		if err := c.requestCatchUp(ctx); err != nil {
			return nil, err
		}
		return c.iterator(ctx, arn, shardID, "")
	}
	if err != nil {
		return nil, fmt.Errorf("get shard iterator: %w", err)
	}
	return out.ShardIterator, nil
}

// Status reports the consumer's shards, progress and lag.
func (c *Consumer) Status() consumerstatus.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := consumerstatus.Status{Owner: c.o.Owner, Applied: c.applied, NewestApplied: c.lastSeen, Lag: c.lastLag, LastPass: c.lastPass, CaughtUp: len(c.shards) > 0}
	for id, sh := range c.shards {
		st.Shards = append(st.Shards, id)
		st.CaughtUp = st.CaughtUp && sh.caughtUp
	}
	slices.Sort(st.Shards)
	st.LagText = st.Lag.Round(time.Millisecond).String()
	return st
}
