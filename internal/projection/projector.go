package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// StreamsAPI is the part of the DynamoDB Streams client the projector uses.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// TableAPI finds the ledger table's stream.
type TableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Options configure a Projector. Zero values take the defaults.
type Options struct {
	Owner            string        // this process's name in the lease table; default host-pid-random
	LeaseTTL         time.Duration // a lease not renewed for this long may be taken over; default 10s
	PollInterval     time.Duration // wait after an empty read of a shard; default 250ms
	DiscoverInterval time.Duration // how often to look for shards and free leases; default 2s
	Logger           *slog.Logger

	// AfterApply, if set, runs after a batch is applied and before its
	// checkpoint; an error stops the projector there, as a crash would.
	// (Any other failure of a shard is logged, and the shard resumes from
	// its checkpoint at the next discovery.)
	AfterApply func(shardID string, records int) error
}

// Projector consumes the ledger table's stream into History. Several
// projectors (processes) may run against one stream: each shard is processed
// by the one holding its lease, a shard only after its parent is finished,
// and a checkpoint is written only after its records are applied. Applying
// is idempotent, so records applied again after a crash or a takeover change
// nothing.
type Projector struct {
	table   string
	tables  TableAPI
	streams StreamsAPI
	leases  *LeaseTable
	history *History
	o       Options
	log     *slog.Logger

	fatal    chan error
	catchUp  chan struct{}
	mu       sync.Mutex
	shards   map[string]*shardState // by shard id, while this projector holds it
	applied  int64
	lastLag  time.Duration
	lastSeen time.Time // create_time of the newest entry applied
	lastPass time.Time // when the projector last applied or found nothing new
}

type shardState struct {
	lease    *Held
	caughtUp bool // the last read returned nothing new
}

// DefaultOwner names this process as a lease owner: the host, the pid and
// a random part, so that a restarted process is another owner.
func DefaultOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), ulid.Make().String()[20:])
}

// NewProjector returns a projector of the stream of table into h.
func NewProjector(table string, tables TableAPI, streams StreamsAPI, leases *LeaseTable, h *History, o Options) *Projector {
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
	return &Projector{
		table: table, tables: tables, streams: streams, leases: leases, history: h, o: o,
		log:     o.Logger.With("projector", o.Owner),
		fatal:   make(chan error, 1),
		catchUp: make(chan struct{}, 1),
		shards:  map[string]*shardState{},
	}
}

// Owner is the name this projector holds leases under.
func (p *Projector) Owner() string { return p.o.Owner }

// Run projects until ctx ends (returning nil) or an AfterApply hook fails.
// Leases it holds are not released: call Release for a clean handover.
func (p *Projector) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // stop the workers, then wait for them
	wg.Go(func() { p.catchUpLoop(ctx) })
	tick := time.NewTicker(p.o.DiscoverInterval)
	defer tick.Stop()
	for {
		if err := p.discover(ctx, &wg); err != nil && ctx.Err() == nil {
			p.log.WarnContext(ctx, "shard discovery failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-p.fatal:
			return err
		case <-tick.C:
		}
	}
}

// Release gives up the leases this projector holds, so that others take
// the shards over at once. Call it after Run returns.
func (p *Projector) Release(ctx context.Context) {
	p.mu.Lock()
	held := slices.Collect(maps.Values(p.shards))
	p.mu.Unlock()
	for _, sh := range held {
		if sh.lease == nil {
			continue // its worker never started
		}
		if err := sh.lease.Release(ctx); err != nil {
			p.log.WarnContext(ctx, "release lease", "lease", sh.lease.Lease().Key, "error", err)
		}
	}
}

func (p *Projector) streamArn(ctx context.Context) (string, error) {
	out, err := p.tables.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &p.table})
	if err != nil {
		return "", fmt.Errorf("describe table %s: %w", p.table, err)
	}
	if out.Table.LatestStreamArn == nil {
		return "", fmt.Errorf("table %s has no stream", p.table)
	}
	return *out.Table.LatestStreamArn, nil
}

// discover lists the stream's shards and starts a worker for each shard that
// is ready (not finished, parent finished) and whose lease it can take.
func (p *Projector) discover(ctx context.Context, wg *sync.WaitGroup) error {
	arn, err := p.streamArn(ctx)
	if err != nil {
		return err
	}
	var shards []types.Shard
	in := &dynamodbstreams.DescribeStreamInput{StreamArn: &arn}
	for {
		out, err := p.streams.DescribeStream(ctx, in)
		if err != nil {
			return fmt.Errorf("describe stream: %w", err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if out.StreamDescription.LastEvaluatedShardId == nil {
			break
		}
		in.ExclusiveStartShardId = out.StreamDescription.LastEvaluatedShardId
	}
	listed := map[string]bool{}
	for _, sh := range shards {
		listed[*sh.ShardId] = true
	}
	for _, sh := range shards {
		id := *sh.ShardId
		p.mu.Lock()
		_, mine := p.shards[id]
		p.mu.Unlock()
		if mine {
			continue
		}
		lease, _, err := p.leases.Get(ctx, leaseKey(id))
		if err != nil {
			return err
		}
		if lease.Finished {
			continue
		}
		// A child waits for its parent. A parent no longer in the stream was
		// trimmed: if it was not finished, its records are lost to the stream
		// and the ledger must supply them.
		parentLost := false
		if parent := aws.ToString(sh.ParentShardId); parent != "" {
			pl, _, err := p.leases.Get(ctx, leaseKey(parent))
			if err != nil {
				return err
			}
			switch {
			case pl.Finished:
			case listed[parent]:
				continue
			default:
				parentLost = true
			}
		}
		lease, err = p.leases.Acquire(ctx, leaseKey(id), p.o.Owner, p.o.LeaseTTL)
		if errors.Is(err, ErrLeaseHeld) {
			continue
		}
		if err != nil {
			return err
		}
		p.log.InfoContext(ctx, "shard lease taken", "shard", id, "checkpoint", lease.Checkpoint)
		if parentLost && lease.Checkpoint == "" {
			p.log.ErrorContext(ctx, "parent shard was trimmed before it was finished; catching up from the ledger", "shard", id, "parent", aws.ToString(sh.ParentShardId))
			if err := p.requestCatchUp(ctx); err != nil {
				return err
			}
		}
		st := &shardState{}
		p.mu.Lock()
		p.shards[id] = st
		p.mu.Unlock()
		wg.Go(func() {
			err := p.process(ctx, arn, id, st, lease)
			if ctx.Err() == nil {
				// Still held on shutdown, so that Release can hand it over.
				p.mu.Lock()
				delete(p.shards, id)
				p.mu.Unlock()
			}
			var crash *hookError
			switch {
			case err == nil, ctx.Err() != nil:
			case errors.Is(err, ErrLeaseLost):
				p.log.WarnContext(ctx, "shard lease lost", "shard", id, "error", err)
			case errors.As(err, &crash):
				select {
				case p.fatal <- fmt.Errorf("shard %s: %w", id, crash.err):
				default:
				}
			default:
				// Still this projector's lease: the next discovery takes the
				// shard up again from its checkpoint.
				p.log.ErrorContext(ctx, "shard failed; resuming from its checkpoint", "shard", id, "error", err)
			}
		})
	}
	return nil
}

func leaseKey(shardID string) string { return "SHARD#" + shardID }

// hookError is an error of Options.AfterApply: it stops the projector, as
// the crash it stands for would.
type hookError struct{ err error }

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// process reads one shard from its checkpoint until the shard ends, the
// lease is lost, or ctx ends.
func (p *Projector) process(ctx context.Context, arn, shardID string, st *shardState, taken Lease) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := p.leases.Hold(taken, p.o.LeaseTTL, func(err error) {
		if errors.Is(err, ErrLeaseLost) {
			cancel(err)
		}
	})
	defer held.Stop()
	p.mu.Lock()
	st.lease = held
	p.mu.Unlock()
	lease := held.Lease

	iter, err := p.iterator(ctx, arn, shardID, lease().Checkpoint)
	if err != nil {
		return err
	}
	trims := 0 // trimmed answers in a row
	for {
		out, err := p.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
		var expired *types.ExpiredIteratorException
		var trimmed *types.TrimmedDataAccessException
		if err == nil {
			trims = 0
		}
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.As(err, &expired):
			p.log.InfoContext(ctx, "shard iterator expired; resuming from the checkpoint", "shard", shardID)
			if iter, err = p.iterator(ctx, arn, shardID, lease().Checkpoint); err != nil {
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
				p.log.ErrorContext(ctx, "stream keeps answering trimmed; catching up from the ledger", "shard", shardID, "error", err)
				if err := p.requestCatchUp(ctx); err != nil {
					return err
				}
				trims = 0
			case lease().Checkpoint == "":
				p.log.DebugContext(ctx, "stream answered trimmed before the first record; reading the shard from its start again", "shard", shardID, "error", err)
			default:
				p.log.InfoContext(ctx, "stream answered trimmed; resuming from the checkpoint", "shard", shardID, "error", err)
			}
			if iter, err = p.iterator(ctx, arn, shardID, lease().Checkpoint); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("get records: %w", err)
		}

		finished, err := p.applyPage(ctx, shardID, st, held, out)
		if err != nil {
			return err
		}
		if finished {
			p.log.InfoContext(ctx, "shard finished", "shard", shardID)
			return nil
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(p.o.PollInterval):
			}
		}
	}
}

// applyPage applies a page of a shard's records and checkpoints past them
// (or marks the shard finished, after its last page), and says whether the
// shard is finished.
func (p *Projector) applyPage(ctx context.Context, shardID string, st *shardState, held *Held, out *dynamodbstreams.GetRecordsOutput) (finished bool, err error) {
	if len(out.Records) > 0 {
		if err := p.apply(ctx, out.Records); err != nil {
			return false, err
		}
		if p.o.AfterApply != nil {
			if err := p.o.AfterApply(shardID, len(out.Records)); err != nil {
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
	p.mu.Lock()
	st.caughtUp = len(out.Records) == 0
	p.lastPass = time.Now()
	p.mu.Unlock()
	return finished, nil
}

func (p *Projector) iterator(ctx context.Context, arn, shardID, checkpoint string) (*string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &shardID, ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
	if checkpoint != "" {
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, &checkpoint
	}
	out, err := p.streams.GetShardIterator(ctx, in)
	var trimmed *types.TrimmedDataAccessException
	if errors.As(err, &trimmed) && checkpoint != "" {
		// Records after the checkpoint are gone (the stream keeps 24 hours):
		// read on from the oldest kept, and bring every user that is behind
		// up to date from the ledger.
		p.log.ErrorContext(ctx, "checkpoint is older than the stream keeps; catching up from the ledger", "shard", shardID, "checkpoint", checkpoint)
		if err := p.requestCatchUp(ctx); err != nil {
			return nil, err
		}
		return p.iterator(ctx, arn, shardID, "")
	}
	if err != nil {
		return nil, fmt.Errorf("get shard iterator: %w", err)
	}
	return out.ShardIterator, nil
}

// apply projects a batch of stream records. Only new entries matter: a
// purchase's refunded amount in history comes from its refund entries (see
// History), so the MODIFY records of purchases are not needed, and it does
// not matter whether they arrive, or in which order.
func (p *Projector) apply(ctx context.Context, records []types.Record) error {
	var inserts []ledger.Entry
	for _, r := range records {
		sk, _ := r.Dynamodb.Keys["SK"].(*types.AttributeValueMemberS)
		if sk == nil || !dynamo.IsEntryKey(sk.Value) {
			continue // accounts and request records are not history
		}
		switch r.EventName {
		case types.OperationTypeInsert:
		case types.OperationTypeModify:
			continue // a purchase's refunded amount: history has it from the refund
		default:
			p.log.WarnContext(ctx, "an entry was removed from the ledger; history keeps it", "sk", sk.Value)
			continue
		}
		e, ok, err := dynamo.DecodeEntry(fromStream(r.Dynamodb.NewImage))
		if err == nil && !ok {
			err = errors.New("not an entry")
		}
		if err != nil {
			return fmt.Errorf("decode stream record %s: %w", aws.ToString(r.Dynamodb.SequenceNumber), err)
		}
		inserts = append(inserts, e)
	}
	if len(inserts) > 0 {
		if err := p.history.Apply(ctx, inserts); err != nil {
			return err
		}
	}
	if n := len(inserts); n > 0 {
		newest := inserts[0].CreateTime
		for _, e := range inserts {
			if e.CreateTime.After(newest) {
				newest = e.CreateTime
			}
		}
		p.mu.Lock()
		p.applied += int64(n)
		p.lastSeen, p.lastLag = newest, time.Since(newest)
		p.mu.Unlock()
	}
	return nil
}

// requestCatchUp records a catch-up request in the lease table (see
// LeaseTable.RequestCatchUp) before the caller reads on past a loss, and
// wakes the catch-up loop.
func (p *Projector) requestCatchUp(ctx context.Context) error {
	if err := p.leases.RequestCatchUp(ctx, catchUpKey(p.table)); err != nil {
		return err
	}
	p.wakeCatchUp()
	return nil
}

func (p *Projector) wakeCatchUp() {
	select {
	case p.catchUp <- struct{}{}:
	default: // one is pending already
	}
}

// catchUpKey is the lease-table key of the catch-up requests of table's
// projection.
func catchUpKey(table string) string { return "CATCHUP#" + table }

// catchUpLoop answers catch-up requests: its own projector's at once, and
// any left by a projector that stopped before answering them, found when it
// starts and every DiscoverInterval.
func (p *Projector) catchUpLoop(ctx context.Context) {
	tick := time.NewTicker(p.o.DiscoverInterval)
	defer tick.Stop()
	key := catchUpKey(p.table)
	for {
		if err := p.answerCatchUps(ctx, key); err != nil && ctx.Err() == nil {
			p.log.ErrorContext(ctx, "catch-up from the ledger failed; will retry", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.catchUp:
		case <-tick.C:
		}
	}
}

// answerCatchUps catches up from the ledger if requests wait under key, and
// clears the ones it answered.
func (p *Projector) answerCatchUps(ctx context.Context, key string) error {
	requests, err := p.leases.CatchUpRequests(ctx, key)
	if err != nil || requests == 0 {
		return err
	}
	users, err := p.history.CatchUp(ctx)
	if err != nil {
		return err
	}
	p.log.InfoContext(ctx, "caught up from the ledger", "users_behind", users)
	cleared, err := p.leases.ClearCatchUp(ctx, key, requests)
	if err == nil && !cleared {
		p.wakeCatchUp() // more came meanwhile
	}
	return err
}

// Status reports the projector's shards, progress and lag.
func (p *Projector) Status() history.ProjectorStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := history.ProjectorStatus{Owner: p.o.Owner, Applied: p.applied, NewestApplied: p.lastSeen, Lag: p.lastLag, LastPass: p.lastPass, CaughtUp: len(p.shards) > 0}
	for id, sh := range p.shards {
		st.Shards = append(st.Shards, id)
		st.CaughtUp = st.CaughtUp && sh.caughtUp
	}
	slices.Sort(st.Shards)
	st.LagText = st.Lag.Round(time.Millisecond).String()
	return st
}

// fromStream converts a stream image to the DynamoDB client's attribute
// values (the two SDK packages have twin types).
func fromStream(item map[string]types.AttributeValue) map[string]ddbtypes.AttributeValue {
	out := make(map[string]ddbtypes.AttributeValue, len(item))
	for k, v := range item {
		out[k] = fromStreamValue(v)
	}
	return out
}

func fromStreamValue(v types.AttributeValue) ddbtypes.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return &ddbtypes.AttributeValueMemberS{Value: v.Value}
	case *types.AttributeValueMemberN:
		return &ddbtypes.AttributeValueMemberN{Value: v.Value}
	case *types.AttributeValueMemberB:
		return &ddbtypes.AttributeValueMemberB{Value: v.Value}
	case *types.AttributeValueMemberBOOL:
		return &ddbtypes.AttributeValueMemberBOOL{Value: v.Value}
	case *types.AttributeValueMemberNULL:
		return &ddbtypes.AttributeValueMemberNULL{Value: v.Value}
	case *types.AttributeValueMemberSS:
		return &ddbtypes.AttributeValueMemberSS{Value: v.Value}
	case *types.AttributeValueMemberNS:
		return &ddbtypes.AttributeValueMemberNS{Value: v.Value}
	case *types.AttributeValueMemberBS:
		return &ddbtypes.AttributeValueMemberBS{Value: v.Value}
	case *types.AttributeValueMemberM:
		return &ddbtypes.AttributeValueMemberM{Value: fromStream(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]ddbtypes.AttributeValue, len(v.Value))
		for i, x := range v.Value {
			l[i] = fromStreamValue(x)
		}
		return &ddbtypes.AttributeValueMemberL{Value: l}
	}
	return &ddbtypes.AttributeValueMemberNULL{Value: true}
}
